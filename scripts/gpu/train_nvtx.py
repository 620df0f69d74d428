"""A PyTorch training loop with NVTX ranges (torch.cuda.nvtx), unchanged for powerperf:
under `powerperf collect` the ranges become regions through NVTX injection.

Usage: python3 train_nvtx.py [EPOCHS] [STEPS] [WIDTH]

WIDTH (default 4096) is the hidden layer's width; the batch is half of it. The backward
pass's kernels are launched by autograd's own thread, not the one holding the range.
"""
import sys
import time

import torch

epochs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 50
width = int(sys.argv[3]) if len(sys.argv) > 3 else 4096
torch.manual_seed(0)
model = torch.nn.Sequential(
    torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width), torch.nn.ReLU(),
    torch.nn.Linear(width, 10),
).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(width // 2, width, device="cuda")
y = torch.randint(0, 10, (width // 2,), device="cuda")
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
