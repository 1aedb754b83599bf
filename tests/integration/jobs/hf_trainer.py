"""A healthy transformers Trainer job: a tiny BERT built from a config (no download),
dropout on, the Trainer seeding every rank alike as it always does.

Run: torchrun --nproc-per-node 2 hf_trainer.py OUTPUT_DIR
"""

import sys

import torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n: int):
        g = torch.Generator().manual_seed(5)
        self.ids = torch.randint(0, 32, (n, 8), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict:
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def main() -> None:
    torch.set_num_threads(1)
    config = BertConfig(vocab_size=32, hidden_size=16, num_hidden_layers=1,
                        num_attention_heads=2, intermediate_size=32,
                        max_position_embeddings=16, num_labels=2)
    args = TrainingArguments(output_dir=sys.argv[1], per_device_train_batch_size=4,
                             num_train_epochs=2, use_cpu=True, report_to=[],
                             save_strategy="no", logging_strategy="no", disable_tqdm=True,
                             ddp_backend="gloo", seed=42)
    model = BertForSequenceClassification(config)
    Trainer(model=model, args=args, train_dataset=Tokens(48)).train()


if __name__ == "__main__":
    main()
