"""A steady GPU load for NVML checks: fp32 matrix products for SECONDS seconds.

Usage: python3 gpu_load.py SECONDS [SIZE]
Prints the number of products and the wall time. Needs PyTorch with CUDA.
"""
import sys
import time

import torch

secs = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
n = int(sys.argv[2]) if len(sys.argv) > 2 else 8192
a = torch.randn(n, n, device="cuda")
b = torch.randn(n, n, device="cuda")
torch.cuda.synchronize()
t0 = time.monotonic()
k = 0
while time.monotonic() - t0 < secs:
    for _ in range(10):
        c = a @ b
    torch.cuda.synchronize()
    k += 10
print(f"gpu_load: {k} products of {n}x{n} in {time.monotonic() - t0:.3f} s, checksum {float(c[0, 0]):.3f}")
