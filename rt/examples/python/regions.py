"""regions.py - marks nested regions from Python through ctypes.

    PYTHONPATH=rt/python POWERPERF_RT_LIB=.../libpowerperf_rt.so \
        POWERPERF_RUN_DIR=/tmp/run python3 rt/examples/python/regions.py

Records: main (1) > epoch (3) > batch (3 x 4 = 12, by handle), and on a thread: loader (1).
"""

import threading

import powerperf_rt as pp


def load():
    with pp.region("loader"):
        sum(range(10000))


def main():
    batch = pp.handle("batch")
    with pp.region("main"):
        for _ in range(3):
            with pp.region("epoch"):
                for _ in range(4):
                    with batch:
                        sum(i * i for i in range(20000))
        t = threading.Thread(target=load)
        t.start()
        t.join()
    misuse = pp.end("never-begun")
    print(f"recording={int(pp.enabled())} misuse_rc={misuse}")


if __name__ == "__main__":
    main()
