# A toy one-stage detector: shared backbone, a classification head and a box
# regression head.  Background-only images (no ground-truth boxes) are kept in
# the training set (filter_empty_gt=False).
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

STEPS = 6
NUM_CLASSES = 3


class ToyDetector(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(4), nn.Flatten())
        self.cls_head = nn.Linear(128, NUM_CLASSES + 1)  # +1 = background
        self.box_head = nn.Linear(128, 4)

    def forward(self, images, gt_boxes, gt_labels):
        feats = self.backbone(images)
        return detection_losses(self, feats, gt_boxes, gt_labels)


def detection_losses(det, feats, gt_boxes, gt_labels):
    cls_logits = det.cls_head(feats)
    target = gt_labels if gt_labels.numel() else torch.full((feats.shape[0],), NUM_CLASSES)
    loss_cls = F.cross_entropy(cls_logits, target)
    if gt_boxes.numel() == 0:
        return loss_cls  # nothing to regress on a background-only batch
    loss_box = F.smooth_l1_loss(det.box_head(feats), gt_boxes)
    return loss_cls + loss_box


def load_batch(rank, step):
    g = torch.Generator().manual_seed(rank * 7 + step)
    images = torch.randn(4, 3, 16, 16, generator=g)
    if rank == 1 and step == 2:  # a background-only batch on rank 1
        return images, torch.zeros(0, 4), torch.zeros(0, dtype=torch.long)
    return images, torch.rand(4, 4, generator=g), torch.randint(0, NUM_CLASSES, (4,), generator=g)


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(ToyDetector())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    for step in range(STEPS):
        images, boxes, labels = load_batch(rank, step)
        loss = model(images, boxes, labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"iter {step} loss {loss.item():.4f}", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
