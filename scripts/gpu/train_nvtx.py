"""A PyTorch training loop with NVTX ranges (torch.cuda.nvtx), unchanged for powerperf:
under `powerperf collect` the ranges become regions through NVTX injection.

Usage: python3 train_nvtx.py [EPOCHS] [STEPS]
"""
import sys
import time

import torch

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 50
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096), torch.nn.ReLU(),
    torch.nn.Linear(4096, 10),
).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(2048, 4096, device="cuda")
y = torch.randint(0, 10, (2048,), device="cuda")
t0 = time.monotonic()
for e in range(epochs):
    torch.cuda.nvtx.range_push("epoch")
    for s in range(steps):
        torch.cuda.nvtx.range_push("forward")
        loss = torch.nn.functional.cross_entropy(model(x), y)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.range_push("backward")
        opt.zero_grad()
        loss.backward()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
        torch.cuda.nvtx.range_push("optimizer")
        opt.step()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    torch.cuda.nvtx.range_pop()
print(f"train_nvtx: {epochs} epochs x {steps} steps in {time.monotonic() - t0:.3f} s, loss {loss.item():.4f}")
