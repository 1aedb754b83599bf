# Reconstructed from https://github.com/huggingface/accelerate/issues/2785
# (gather_for_metrics called under accelerator.is_main_process: the script hangs).
import torch
import torch.nn as nn
from accelerate import Accelerator
from torch.utils.data import DataLoader
from torchvision import datasets, transforms
from torchvision.models import resnet18

accelerator = Accelerator(gradient_accumulation_steps=2)
model = resnet18()
transform = transforms.Compose([transforms.Resize((64, 64)), transforms.ToTensor()])
trainset = datasets.CIFAR10(root=".", train=True, transform=transform, download=True)
testset = datasets.CIFAR10(root=".", train=False, transform=transform, download=True)
trainloader = DataLoader(trainset, batch_size=64, shuffle=True)
testloader = DataLoader(testset, batch_size=64)
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
model, optimizer, trainloader, testloader = accelerator.prepare(model, optimizer, trainloader,
                                                                testloader)

for epoch in range(50):
    model.train()
    for images, targets in trainloader:
        with accelerator.accumulate(model):
            loss = loss_fn(model(images), targets)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
    if accelerator.is_main_process:
        model.eval()
        correct = 0
        for images, targets in testloader:
            with torch.no_grad():
                preds = model(images).argmax(axis=1)
            preds, targets = accelerator.gather_for_metrics((preds, targets))
            correct += (preds == targets).sum().item()
        print(epoch, correct)
