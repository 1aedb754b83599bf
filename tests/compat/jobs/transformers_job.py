"""transformers Trainer on a tiny model built from a config (no download), under torchrun
on 2 CPU ranks.  Usage: torchrun --nproc-per-node 2 transformers_job.py OUT."""

import os
import sys

import torch
from torch.utils.data import Dataset
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class Tiny(Dataset):
    def __init__(self) -> None:
        g = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, 50, (32, 8), generator=g)
        self.labels = torch.randint(0, 2, (32,), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def main() -> None:
    out = sys.argv[1]
    torch.manual_seed(0)
    config = BertConfig(vocab_size=50, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32, max_position_embeddings=16)
    model = BertForSequenceClassification(config)
    args = TrainingArguments(output_dir=os.path.join(out, "trainer"), per_device_train_batch_size=4,
                             num_train_epochs=1, use_cpu=True, report_to=[], save_strategy="no",
                             logging_strategy="no", ddp_backend="gloo", seed=0,
                             dataloader_num_workers=0, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=Tiny())
    trainer.train()
    params = {k: v.detach().clone() for k, v in model.state_dict().items()}
    torch.save({"params": {"trainer": params}, "checks": {}},
               os.path.join(out, f"rank{args.process_index}.pt"))


if __name__ == "__main__":
    main()
