# Reconstructed from https://github.com/huggingface/transformers/issues/31532
# (a progress bar disabled off the main process: its counter decides when to evaluate, so only
# the main process evaluates and gather_for_metrics waits forever).
import torch
from accelerate import Accelerator
from tqdm.auto import tqdm


def train(args, model, optimizer, train_dataloader, eval_dataloader):
    accelerator = Accelerator()
    model, optimizer, train_dataloader, eval_dataloader = accelerator.prepare(
        model, optimizer, train_dataloader, eval_dataloader)
    progress_bar = tqdm(range(args.num_epochs * len(train_dataloader)),
                        disable=not accelerator.is_main_process)
    for epoch in range(args.num_epochs):
        model.train()
        for batch in train_dataloader:
            loss = model(**batch).loss
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            progress_bar.update(1)
            if progress_bar.n % args.eval_steps == 0:
                model.eval()
                for eval_batch in eval_dataloader:
                    with torch.no_grad():
                        logits = model(**eval_batch).logits
                    preds = accelerator.gather_for_metrics(logits.argmax(-1))
                    print(preds.shape)
                model.train()
