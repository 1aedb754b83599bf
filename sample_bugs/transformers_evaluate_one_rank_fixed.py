#!/usr/bin/env python
"""Fixed twin: every rank calls `trainer.evaluate()`; only the print stays on rank 0.

A callback evaluates at the end of each epoch "on the main process only".  Trainer's
evaluation loop gathers the losses of every rank, so rank 0 waits in a gather that rank 1,
already training again, never calls.
Source: huggingface/transformers#31532 (evaluation entered by the main process only hangs
in gather_for_metrics).
Run: torchrun --nproc-per-node 2 transformers_evaluate_one_rank_fixed.py
"""
import datetime
import os
import tempfile

import torch
import torch.distributed as dist
from torch.utils.data import Dataset
from transformers import (BertConfig, BertForSequenceClassification, Trainer, TrainerCallback,
                          TrainingArguments)


class Tiny(Dataset):
    def __init__(self) -> None:
        g = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, 50, (32, 8), generator=g)
        self.labels = torch.randint(0, 2, (32,), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


class EvaluateOnMainProcess(TrainerCallback):
    """Evaluates at the end of each epoch, "on the main process only, to save time"."""

    def __init__(self) -> None:
        self.trainer: Trainer | None = None

    def on_epoch_end(self, args, state, control, **kwargs):
        metrics = self.trainer.evaluate()  # FIX: on every rank (it gathers from all)
        if state.is_world_process_zero:
            print(metrics, flush=True)


def main() -> None:
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    print(f"rank {rank} starts", flush=True)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=16)
    model = BertForSequenceClassification(config)
    out = os.path.join(tempfile.gettempdir(), "ddpdoctor-sample-bugs", f"hf-{os.getppid()}")
    args = TrainingArguments(output_dir=out, per_device_train_batch_size=4,
                             per_device_eval_batch_size=4, num_train_epochs=3, use_cpu=True,
                             report_to=[], save_strategy="no", logging_strategy="no",
                             ddp_backend="gloo", disable_tqdm=True)
    callback = EvaluateOnMainProcess()
    trainer = Trainer(model=model, args=args, train_dataset=Tiny(), eval_dataset=Tiny(),
                      callbacks=[callback])
    callback.trainer = trainer
    trainer.train()
    dist.barrier()  # every rank is done before the group goes away
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
