"""A small real program with marked regions, for the run tour notebook.

    powerperf collect -o run -- python3 notebooks/workload_regions.py [SOURCE_DIR]

It reads the files under SOURCE_DIR (default: this repository's src/), then compresses
them (zlib), hashes them (SHA-256) and sorts their lines, each step a region inside
`main`; the hashing runs on a second thread as well, so the run has two threads.

Regions are marked with powerperf-rt (rt/python/powerperf_rt.py) when `powerperf collect`
found libpowerperf_rt.so beside the binary (it then sets POWERPERF_RT_LIB). Otherwise this
script writes the same records itself, in the runtime's documented file format
(rt/README.md, "File format", v1: RUN/region_events/<pid>.tsv, CLOCK_MONOTONIC ns and the
OS thread id), so `collect` still turns them into regions.parquet. It prints which one it
used.
"""

import atexit
import hashlib
import os
import sys
import threading
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


class _FileRegions:
    """Writes RUN/region_events/<pid>.tsv records (v1) like libpowerperf_rt does."""

    name = "own writer (rt/README.md v1 format)"

    def __init__(self, run_dir):
        d = os.path.join(run_dir, "region_events")
        os.makedirs(d, exist_ok=True)
        self.path = os.path.join(d, f"{os.getpid()}.tsv")
        self.lock = threading.Lock()
        self.ids = {}
        self.lines = [f"# powerperf-rt region events v1 pid={os.getpid()}\n"]
        atexit.register(self.flush)

    def _record(self, kind, name):
        t = time.monotonic_ns()  # CLOCK_MONOTONIC on Linux, the clock of every powerperf file
        tid = threading.get_native_id()
        with self.lock:
            if name not in self.ids:
                self.ids[name] = len(self.ids) + 1
                self.lines.append(f"R\t{self.ids[name]}\t{name}\n")
            self.lines.append(f"{kind}\t{t}\t{tid}\t{self.ids[name]}\n")

    def begin(self, name):
        self._record("B", name)

    def end(self, name):
        self._record("E", name)

    def flush(self):
        with self.lock:
            with open(self.path, "w") as f:
                f.writelines(self.lines)


class _RtRegions:
    name = "powerperf-rt (libpowerperf_rt.so)"

    def __init__(self):
        sys.path.insert(0, os.path.join(REPO, "rt", "python"))
        import powerperf_rt  # noqa: E402

        self.pp = powerperf_rt

    def begin(self, name):
        self.pp.begin(name)

    def end(self, name):
        self.pp.end(name)


def _markers():
    run_dir = os.environ.get("POWERPERF_RUN_DIR")
    if not run_dir:
        return None
    if os.environ.get("POWERPERF_RT_LIB") and os.path.exists(os.environ["POWERPERF_RT_LIB"]):
        try:
            return _RtRegions()
        except OSError as e:  # the library did not load: fall back to the file format
            print(f"powerperf-rt did not load ({e}); writing region events directly")
    return _FileRegions(run_dir)


MARK = _markers()


class region:
    def __init__(self, name):
        self.name = name

    def __enter__(self):
        if MARK:
            MARK.begin(self.name)

    def __exit__(self, *exc):
        if MARK:
            MARK.end(self.name)


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(REPO, "src")
    with region("main"):
        with region("read"):
            blobs = []
            for root, _, files in sorted(os.walk(src)):
                for f in sorted(files):
                    with open(os.path.join(root, f), "rb") as fh:
                        blobs.append(fh.read())
            data = b"".join(blobs)
        with region("compress"):
            packed = zlib.compress(data * 4, 9)
        def hash_some():
            with region("hash"):
                h = hashlib.sha256()
                for _ in range(40):
                    h.update(data)
            return h.hexdigest()

        t = threading.Thread(target=hash_some)
        t.start()
        digest = hash_some()
        t.join()
        with region("sort"):
            lines = sorted(data.splitlines() * 3)
    which = MARK.name if MARK else "none (POWERPERF_RUN_DIR unset)"
    print(
        f"read {len(data)} bytes, compressed to {len(packed)}, sha256 {digest[:12]}, "
        f"{len(lines)} lines sorted; regions: {which}"
    )


if __name__ == "__main__":
    main()
