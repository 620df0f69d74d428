"""Many small kernels: N element-wise launches on a small tensor (kernel-launch bound).

Usage: python3 small_kernels.py [N]
Prints the wall time of the launch loop (after a warm-up).
"""
import sys
import time

import torch

n = int(sys.argv[1]) if len(sys.argv) > 1 else 20000
x = torch.randn(1024, device="cuda")
for _ in range(200):
    x = x * 1.0000001 + 1e-7
torch.cuda.synchronize()
t0 = time.monotonic()
for _ in range(n):
    x = x * 1.0000001 + 1e-7
torch.cuda.synchronize()
print(f"small_kernels: {n} iterations (2 kernels each) in {time.monotonic() - t0:.4f} s")
