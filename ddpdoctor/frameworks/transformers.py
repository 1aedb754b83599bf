"""Hugging Face transformers (its Trainer): what ddpdoctor knows of it."""

from __future__ import annotations

from ddpdoctor.frameworks.framework import Environ, Framework, FrameworkMethod, Modules

BUILDER = "from_pretrained"  # Net.from_pretrained(name) is a Net


def seeds_alike(modules: Modules, environ: Environ) -> bool:
    """The Trainer drives the process (``TrainingArguments(seed=...)`` -> ``set_seed``)."""
    return "transformers.trainer" in modules


FRAMEWORK = Framework(
    "transformers", ("transformers",), pip="transformers",
    objects={"Trainer": "hf_trainer", "Seq2SeqTrainer": "hf_trainer"},
    object_attrs={("hf_trainer", "accelerator"): "accelerator"},
    name_words={"trainer": "hf_trainer"},
    object_methods={"hf_trainer": frozenset({"evaluate", "predict", "train"})},
    rank_attrs=frozenset({"is_world_process_zero", "is_local_process_zero"}),
    hidden=(FrameworkMethod("transformers", "transformers.trainer", "Trainer", "save_model",
                            "5.25.0", "the gather of a DeepSpeed ZeRO-3 or FSDP state dict",
                            False),),
    hidden_kinds=("hf_trainer",),
    seeds_alike=seeds_alike,
    seed_fix=(
        "The Trainer seeds every rank alike on purpose (`TrainingArguments(seed=...)` -> "
        "`set_seed`), so the model starts identical; equal dropout on different data is by "
        "design. Keep data randomness per rank: augment in DataLoader workers "
        "(`dataloader_num_workers > 0`: the Trainer seeds each worker with the rank) or "
        "from a generator seeded with `args.seed + args.process_index`; "
        "`TrainingArguments(data_seed=...)` seeds the sampler only."))
