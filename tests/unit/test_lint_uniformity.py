"""The uniformity analysis under lint's rules: values the same on every rank (presence tests,
values moved to the rank's device, length-preserving wrappers, the results of collectives,
dict literals' keys, benign exceptions) fire no rule; the rank-valued twin of each still does.
Each case marks the lines that must be flagged with ``# expect: KIND``."""

from __future__ import annotations

from tests.unit.test_lint_rules import check


def test_presence_tests_are_uniform():
    check("""
    ddp = int(os.environ.get("RANK", -1)) != -1
    local_rank = int(os.environ.get("LOCAL_RANK", -1))
    if ddp:
        dist.init_process_group("nccl")
    if local_rank != -1:
        dist.barrier()
    if os.environ.get("RANK") is not None:
        dist.barrier()
    world_size = dist.get_world_size()
    if world_size > 1:
        dist.barrier()
    def main_first():
        if local_rank in (-1, 0):
            dist.barrier()  # expect: rank_dependent_collective
    """)


def test_gradient_accumulation_split_under_ddp_flag():
    check("""
    ddp = int(os.environ.get("RANK", -1)) != -1
    steps = 40
    if ddp:
        steps //= int(os.environ["WORLD_SIZE"])
    model = DDP(nn.Linear(2, 2))
    for micro in range(steps):
        model(torch.ones(2)).sum().backward()
    if ddp:
        dist.destroy_process_group()
    """)


def test_values_moved_to_the_rank_device_keep_their_values():
    check("""
    local_rank = int(os.environ["LOCAL_RANK"])
    device = f"cuda:{local_rank}"
    device_type = "cuda" if "cuda" in device else "cpu"
    ckpt = torch.load("ckpt.pt", map_location=device)
    start = ckpt["iter_num"]
    model = DDP(nn.Linear(2, 2).to(local_rank), device_ids=[local_rank])
    steps = torch.tensor(100).to(torch.device("cuda", local_rank))
    for it in range(start, int(steps)):
        model(torch.ones(2, device=device)).sum().backward()
    if device_type == "cuda":
        dist.barrier()
    if device == "cuda:0":
        dist.barrier()  # expect: rank_dependent_collective
    """)


def test_length_preserving_wrappers_keep_the_trip_count():
    check("""
    from tqdm import tqdm
    def train(loader, is_main):
        model = DDP(nn.Linear(2, 2))
        for batch in (tqdm(loader) if is_main else loader):
            model(batch).sum().backward()
        for i, batch in enumerate(tqdm(loader, disable=not dist.get_rank() == 0)):
            model(batch).sum().backward()
        for batch in (tqdm(loader) if dist.get_rank() == 0 else loader[:1]):
            model(batch).sum().backward()  # expect: rank_dependent_loop
    """)


def test_progress_helper_that_hands_back_its_argument():
    check("""
    from tqdm import tqdm
    class Trainer:
        def wrap(self, iterable, total):
            if dist.get_rank() == 0:
                return tqdm(iterable, total=total)
            return iterable
        def fit(self, model, loader):
            for i, batch in enumerate(self.wrap(loader, 10)):
                model(batch).sum().backward()
    """)


def test_flag_decided_on_rank0_and_broadcast_is_uniform():
    check("""
    def loop(model, loader, rank):
        rank = dist.get_rank()
        for batch in loader:
            model(batch).sum().backward()
            flag = [False]
            if rank == 0:
                flag = [os.path.exists("STOP")]
            dist.broadcast_object_list(flag, src=0)
            if flag[0]:
                break
            stop = torch.tensor(float(os.path.exists("STOP")))
            dist.all_reduce(stop)
            if stop.item() > 0:
                break
            if os.path.exists("STOP"):
                break  # expect: conditional_skip
    """)


def test_dict_literal_keys_are_uniform():
    check("""
    def report(loss_sum, n):
        stats = {"loss": loss_sum, "n": n}
        for key in stats:
            t = torch.tensor(float(stats[key]))
            dist.all_reduce(t)
    """)


def test_import_error_and_stop_iteration_are_no_rank_local_branches():
    check("""
    try:
        import apex
        has_apex = True
    except ImportError:
        has_apex = False
    def train(model, loader, steps):
        model = DDP(model)
        it = iter(loader)
        for step in range(steps):
            try:
                batch = next(it)
            except StopIteration:
                it = iter(loader)
                batch = next(it)
            if has_apex:
                dist.barrier()
            try:
                batch = batch.cuda()
            except RuntimeError:
                continue  # expect: conditional_skip
            model(batch).sum().backward()
    """)


def test_a_loss_is_rank_local_by_what_flows_into_it_not_by_its_name():
    check("""
    def step(model, loader, loss_scaler, loss_fn, every):
        model = DDP(model)
        for i, batch in enumerate(loader):
            if loss_scaler is not None:
                loss_scaler.scale(loss_fn(model(batch))).backward()
            reduce_global_loss = i % every == 0
            if reduce_global_loss:
                dist.all_reduce(torch.zeros(1))
            train_loss = loss_fn(model(batch)).item()
            if train_loss > 10:
                dist.barrier()  # expect: conditional_collective
    """)


def test_a_name_ending_in_loss_read_from_the_config_is_uniform():
    check("""
    def step(model, batch, cfg):
        model = DDP(model)
        z_loss = cfg.z_loss
        if z_loss is not None:
            dist.all_reduce(torch.zeros(1))
        model(batch).sum().backward()
    """)


def test_values_reduced_in_a_loop_guarded_by_the_world_size():
    check("""
    def log_losses(model, data, world):
        world = dist.get_world_size()
        loss_dict = model(data)
        if dist.get_world_size() > 1:
            for v in loss_dict.values():
                dist.all_reduce(v)
        reduced = {k: v.item() / world for k, v in loss_dict.items()}
        if torch.isnan(torch.tensor(sum(reduced.values()))):
            raise AssertionError("NaN")
        dist.barrier()
        if torch.isnan(data).any():
            return  # expect: conditional_skip
        dist.barrier()
    """)


def test_error_paths_and_validity_checks_are_no_divergence():
    check("""
    def setup(world_size):
        world_size = dist.get_world_size()
        rank_str = os.environ.get("RANK", "0")
        try:
            rank = int(rank_str)
        except ValueError as e:
            raise ValueError(f"bad RANK {rank_str}") from e
        if not 0 <= rank < world_size:
            raise ValueError("RANK out of range")
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
        if rank == 1:
            raise RuntimeError("rank 1 gives up")  # the rank fails: the launcher ends the job
        dist.barrier()
    """)


def test_loader_end_by_any_name_and_things_about_losses():
    check("""
    class DataloaderExhaustedError(Exception):
        pass
    def train(model, it, loss_mesh):
        model = DDP(model)
        while True:
            try:
                batch = next(it)
            except DataloaderExhaustedError:
                break
            if loss_mesh is not None:
                dist.all_reduce(torch.ones(1))
            model(batch).sum().backward()
    """)


def test_world_split_offset_by_the_rank_is_a_split():
    check("""
    def step(params, rank, world_size):
        rank = dist.get_rank()
        world_size = dist.get_world_size()
        for base in range(len(params))[::world_size]:
            if base + rank < len(params):
                params[base + rank].grad.zero_()
        for base in range(len(params))[::world_size]:  # expect: duplicate_data
            params[base].grad.zero_()
    """)


def test_model_change_in_a_method_before_the_wrap_is_no_drift():
    check("""
    class Trainer:
        def __init__(self, model, rank):
            rank = dist.get_rank()
            self.model = model
            self.load(rank)
            self.ddp_model = DDP(self.model)
        def load(self, rank):
            rank = dist.get_rank()
            if rank == 0:
                self.model.load_state_dict(torch.load("ckpt.pt"))
    """)
