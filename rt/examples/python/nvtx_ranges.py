"""nvtx_ranges.py - an unmodified NVTX program: powerperf records its ranges by injection.

    NVTX_INJECTION64_PATH=.../libpowerperf_rt.so POWERPERF_RUN_DIR=/tmp/run \
        python3 rt/examples/python/nvtx_ranges.py

Uses only the `nvtx` package (pip install nvtx), no powerperf import. Records:
  train (1) > epoch (3, push/pop) > step (3 x 4 = 12, annotate) > kernel (12, decorator)
  train > checkpoint (1, start_range/end_range on the same thread)
  train > (unnamed) (1, annotate without a message)
  train > io (1, domain "loader", push/pop)
  on 2 threads: worker (2, domain "pool") > chunk (2 x 5 = 10)
Prints `nvtx_enabled=<0|1>` (whether a tool was attached).
"""

import threading

import nvtx


@nvtx.annotate("kernel")
def kernel(n):
    return sum(i * i for i in range(n))


def worker():
    with nvtx.annotate("worker", domain="pool"):
        for _ in range(5):
            with nvtx.annotate("chunk", domain="pool"):
                sum(range(5000))


def main():
    nvtx.push_range("train")
    for _ in range(3):
        nvtx.push_range("epoch", color="green")
        for _ in range(4):
            with nvtx.annotate("step", color="blue"):
                kernel(20000)
        nvtx.pop_range()
    rid = nvtx.start_range("checkpoint")
    sum(range(10000))
    nvtx.end_range(rid)
    with nvtx.annotate():
        pass
    nvtx.push_range("io", domain="loader")
    sum(range(10000))
    nvtx.pop_range(domain="loader")
    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    nvtx.pop_range()
    print(f"nvtx_enabled={int(nvtx.enabled())}")


if __name__ == "__main__":
    main()
