#!/usr/bin/env python3
"""The two-clock base-CPI form (docs/models.md, **two clocks**) on a synthetic GPU grid it
does not describe exactly: 30 kernels × 5 core × 5 memory clocks whose issue and transfer
times overlap by a soft maximum (the 4-norm, not the form's max), with 3 % noise on time,
1 % on the instruction count and 2 % on power. The data go through docs/import.md's nvprof
spec, and `evaluate --protocol workload-holdout --model auto` runs twice: with the DRAM
counts (the stack's physical form covers both clocks) and without them (the one-clock form
and the stack's scored fallback at the other memory clocks). Prints model and baseline MAPE
and their ratio per target. Nothing here computes an error: every number is `evaluate`'s.

    cargo build --release --bin powerperf
    python3 scripts/analysis/two_clock_mismatch.py [--bin target/release/powerperf] [--seed 7]
"""
import argparse
import json
import os
import random
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/powerperf"))
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    doc = open(os.path.join(ROOT, "docs/import.md")).read()
    i = doc.index('name = "p100-kernels"')
    spec = doc[i : doc.index("```", i)]
    dram = (
        '[[counter]]\ncolumn = "dram_read_transactions"\nkind = "count"\n'
        '[[counter]]\ncolumn = "dram_write_transactions"\nkind = "count"\n'
    )
    assert dram in spec, "docs/import.md's nvprof spec changed"
    rows = [
        ",appName,coreF,memF,kernel,time/ms,inst_executed,dram_read_transactions,"
        "dram_write_transactions,achieved_occupancy,power/W"
    ]
    for k in range(30):
        n = 1e8 * (1 + 7 * rng.random())
        d = 1e5 + 9e7 * rng.random() ** 2
        lat = 0.004 * rng.random()
        for fm in [500, 600, 700, 800, 900]:
            for fc in [600, 750, 900, 1050, 1200]:
                tc, tm = 0.02 * n / (fc * 1e6), 0.125 * d / (fm * 1e6)
                t = ((tc**4 + tm**4) ** 0.25 + lat) * (1 + rng.gauss(0, 0.03))
                p = 40 + 60 * fc / 1200 * tc / (tc + tm) + 20 * fm / 900
                rows.append(
                    f"{len(rows) - 1},app{k},{fc},{fm},k,{t * 1e3},"
                    f"{n * (1 + rng.gauss(0, 0.01))},{0.7 * d},{0.3 * d},0.5,"
                    f"{p * (1 + rng.gauss(0, 0.02))}"
                )
    with tempfile.TemporaryDirectory() as tmp:
        csv = os.path.join(tmp, "grid.csv")
        open(csv, "w").write("\n".join(rows) + "\n")
        for label, text in [("with DRAM counts", spec), ("without DRAM counts", spec.replace(dram, ""))]:
            sp, out = os.path.join(tmp, "spec.toml"), os.path.join(tmp, label.replace(" ", "_"))
            open(sp, "w").write(text)
            subprocess.run([a.bin, "import", sp, "--file", csv, "-o", out], check=True, capture_output=True)
            cmd = [a.bin, "evaluate", out, "--protocol", "workload-holdout", "--model", "auto", "--format", "json"]
            v = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
            print(f"{label}: {v['protocol']}")
            for t in ["time_s", "power_w", "energy_j"]:
                x = v["versus_baseline"][t]
                print(
                    f"  {t:<9} model {x['model']['mape_pct']:6.2f} %  baseline "
                    f"{x['baseline']['mape_pct']:6.2f} %  ratio {x['ratio']:.3f}  points {x['model']['n']}"
                )


if __name__ == "__main__":
    main()
