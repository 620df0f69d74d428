#!/usr/bin/env python3
"""Regenerate docs/models.md's "Model beside baseline on the shared datasets" table (issue 21):
every shared set × protocol × model, the model's MAPE beside the naive baseline's on the same
split, from `powerperf evaluate … --format json` (keys `versus_baseline`, `held_out`,
`baseline`, `refused`). Nothing here computes an error: every number is `evaluate`'s.

    cargo build --release --bin powerperf
    python3 scripts/analysis/issue21_table.py [--bin target/release/powerperf] [--work DIR]
                                              [--only SET[,SET…]] [--json OUT.json]

Sets are imported into --work (default `issue21-sets/`, ignored by git) from the shipped specs
(`powerperf import datasets/NAME.toml -o DIR/NAME`) when missing. Prints the markdown table
and the command behind each row; `--json` also writes the raw `evaluate` outputs.

Columns: `points` = points the model predicts / held-out points with a reliable measurement;
model and baseline MAPE (%) each over the points it predicts; `ratio` = model / baseline over
the points both predict (below 1: the model wins). The last column applies issue 21's item-6
rules to the ratio or the error (workload holdout: time ≤ ½ and power ≤ ¾ of the baseline's,
V100 power ≤ 5 %; joint split: ≤ the separable rule; V100 knob holdout power ≤ the
quadratic); a row without a rule says "–".
"""
import argparse
import json
import os
import subprocess
import sys
import time

TITANX_JOINT_CSV = "core_freq_mhz,mem_freq_mhz\n" + "".join(
    f"{f},3505\n" for f in [595, 633, 671, 709, 747, 785, 823, 861, 899, 937, 975, 1013, 1050, 1088, 1126, 1164]
) + "595,810\n"
PARSEC_JOINT_CSV = "threads,core_freq_mhz\n1,1000\n1,1400\n1,1800\n2,1000\n"

KH, WH = "knob-holdout", "workload-holdout"
VF = '{"analytic":{"power_shape":"voltage_floor"}}'
PL = '{"analytic":{"power_shape":"power_law"}}'
ROOF = '{"analytic_counters":{"combine":"max"}}'
ROOFP = '{"analytic_counters":{"combine":"max","power_transfer":"roofline"}}'
BCPI = '{"analytic_counters":{"combine":"base_cpi"}}'
# (set, label, protocol, extra args, models, rule)
ROWS = [
    ("titanx-micro", "knob holdout 595/861/1164", KH, ["--train", "core_freq_mhz=595,861,1164"], ["auto"], None),
    ("titanx-micro", "knob holdout 595/861/1164, one k per chip (`power_law`, the default before stop 29)", KH,
     ["--train", "core_freq_mhz=595,861,1164", "--params", PL], ["analytic"], None),
    ("titanx-micro", "knob holdout 595/861/1164, voltage floor (opt-in)", KH,
     ["--train", "core_freq_mhz=595,861,1164", "--params", VF], ["analytic"], None),
    ("titanx-micro", "595/861/1164 × memory 3505 only", KH,
     ["--train", "core_freq_mhz=595,861,1164", "--train", "mem_freq_mhz=3505"], ["auto"], None),
    ("titanx-micro", "joint split: 3505 MHz at 16 clocks + 810 MHz at 595", KH,
     ["--train-points", "@titanx_joint.csv"], ["auto"], "joint"),
    ("titanx-micro", "workload holdout from 1164/3505 MHz", WH,
     ["--baseline", "core_freq_mhz=1164,mem_freq_mhz=3505"], ["auto", "scaling", "neighbors", "spca"], "wh"),
    ("v100-dcgm-sweep", "knob holdout 510/945/1380", KH, ["--train", "core_freq_mhz=510,945,1380"], ["auto"], "v100kh"),
    ("v100-dcgm-sweep", "knob holdout 510/945/1380, one k per chip (`power_law`, the default before stop 29)", KH,
     ["--train", "core_freq_mhz=510,945,1380", "--params", PL], ["analytic"], "v100kh"),
    ("v100-dcgm-sweep", "knob holdout 510/945/1380, voltage floor (opt-in)", KH,
     ["--train", "core_freq_mhz=510,945,1380", "--params", VF], ["analytic"], "v100kh"),
    ("v100-dcgm-sweep", "workload holdout from 1380 MHz", WH, ["--baseline", "core_freq_mhz=1380"], ["auto", "scaling", "neighbors", "spca"], "wh-v100"),
    ("v100-dcgm-sweep", "workload holdout from 1380 MHz, bound and bottleneck (opt-in)", WH,
     ["--baseline", "core_freq_mhz=1380", "--params", ROOF], ["analytic-counters"], "wh-v100"),
    ("v100-dcgm-sweep", "workload holdout from 1380 MHz, bound and bottleneck + roofline power (opt-in)", WH,
     ["--baseline", "core_freq_mhz=1380", "--params", ROOFP], ["analytic-counters"], "wh-v100"),
    ("xu3-cbench", "knob holdout 1000/2000 → 1500", KH, ["--train", "core_freq_mhz=1000,2000"], ["auto"], None),
    ("xu3-cbench", "workload holdout from 2000 MHz", WH, ["--baseline", "core_freq_mhz=2000"], ["auto", "scaling", "neighbors", "spca"], "wh"),
    ("xu3-cbench", "workload holdout from 2000 MHz, base CPI alone (opt-in)", WH,
     ["--baseline", "core_freq_mhz=2000", "--params", BCPI], ["analytic-counters"], "wh"),
    ("xu3-parsec-joint", "knob holdout 1000/1800 → 1400", KH, ["--train", "core_freq_mhz=1000,1800"], ["auto"], None),
    ("xu3-parsec-joint", "joint split: 1 core × 1000/1400/1800 + 2 cores × 1000", KH,
     ["--train-points", "@parsec_joint.csv"], ["auto"], "joint"),
    ("xu3-parsec-joint", "workload holdout from 1800 MHz, 2 cores", WH, [], ["auto", "scaling", "neighbors", "spca"], "wh"),
    ("multicore-xeon", "knob holdout threads 1–5", KH, ["--train", "threads=1,2,3,4,5"], ["auto"], None),
    ("multicore-xeon", "workload holdout from 20 threads", WH, [], ["auto", "scaling", "neighbors", "spca"], "wh-nocounters"),
    ("multicore-amd", "knob holdout threads 1–12", KH, ["--train", "threads=" + ",".join(map(str, range(1, 13)))], ["auto"], None),
    ("multicore-amd", "workload holdout from 48 threads", WH, [], ["auto", "scaling", "neighbors", "spca"], "wh-nocounters"),
    ("multicore-i7", "knob holdout threads 1–2", KH, ["--train", "threads=1,2"], ["auto"], None),
    ("multicore-i7", "workload holdout from 8 threads", WH, [], ["auto", "scaling", "neighbors", "spca"], "wh-nocounters"),
]

TARGETS = [("time_s", "time"), ("power_w", "power"), ("energy_j", "energy")]


def verdict(rule, target, model, v):
    """Issue 21 item 6's rule for this row and target, applied to evaluate's numbers."""
    ratio = v.get("ratio")
    if ratio is None or rule is None:
        return "–"
    if rule == "joint":
        return "met" if ratio <= 1.0 + 1e-9 else "**not met**"
    if rule == "v100kh":
        return ("met" if ratio <= 1.0 else "**not met**") if target == "power_w" else "–"
    if model in ("scaling", "neighbors"):
        # Shown beside `auto` for comparison; item 6 judges the default (`auto`).
        return "(beside auto)"
    if model == "spca":
        # Item 4: spca earns its place only where it beats the baseline.
        return "spca wins" if ratio < 1.0 else "**spca loses**"
    if rule.startswith("wh"):
        if target == "time_s":
            return "met (≤ ½)" if ratio <= 0.5 else "**not met** (≤ ½)"
        if target == "power_w":
            s = "met (≤ ¾)" if ratio <= 0.75 else "**not met** (≤ ¾)"
            if rule == "wh-v100":
                mape = v["model"]["mape_pct"]
                s += "; ≤ 5 %: " + ("met" if mape <= 5.0 else "**not met**")
            if rule == "wh-nocounters":
                s += "; no counters"
            return s
    return "–"


def run(cmd):
    t0 = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p, time.time() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "release", "powerperf"))
    ap.add_argument("--work", default="issue21-sets")
    ap.add_argument("--only", default="")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    for name, text in [("titanx_joint.csv", TITANX_JOINT_CSV), ("parsec_joint.csv", PARSEC_JOINT_CSV)]:
        with open(os.path.join(a.work, name), "w") as f:
            f.write(text)
    only = set(filter(None, a.only.split(",")))
    raw = []
    lines = [
        "| set | protocol | model | target | points | model MAPE % | baseline MAPE % | ratio | issue 21 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    cmds = []
    for set_name, label, proto, extra, models, rule in ROWS:
        if only and set_name not in only:
            continue
        set_dir = os.path.join(a.work, set_name)
        if not os.path.exists(os.path.join(set_dir, "set.toml")):
            p, _ = run([a.bin, "import", f"datasets/{set_name}.toml", "-o", set_dir])
            if p.returncode != 0:
                print(f"import {set_name} failed: {p.stderr.strip()}", file=sys.stderr)
                continue
        args = [x.replace("@", a.work + "/") if x.startswith("@") else x for x in extra]
        for model in models:
            cmd = [a.bin, "evaluate", set_dir, "--protocol", proto, *args, "--model", model, "--format", "json"]
            shown = " ".join(["powerperf", "evaluate", set_name, "--protocol", proto,
                              *[x.replace("@", "") if not x.startswith("{") else f"'{x}'" for x in extra],
                              "--model", model, "--format", "json"])
            p, secs = run(cmd)
            cmds.append(f"{shown}   # {secs:.1f} s, exit {p.returncode}")
            if p.returncode != 0 and not p.stdout.strip():
                lines.append(f"| {set_name} | {label} | {model} | – | – | – | – | – | exit {p.returncode}: {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ''} |")
                continue
            out = json.loads(p.stdout)
            raw.append({"command": shown, "seconds": secs, "exit": p.returncode, "output": out})
            resolved = out.get("model", model)
            shown_model = resolved if model == resolved else f"{model} = {resolved}"
            for t, tname in TARGETS:
                v = (out.get("versus_baseline") or {}).get(t)
                if not v or v.get("held_out", 0) == 0:
                    continue
                m, b = v["model"], v["baseline"]
                mm = f"{m['mape_pct']:.2f}" if m["n"] else "–"
                bb = f"{b['mape_pct']:.2f}" if b["n"] else "–"
                ratio = f"{v['ratio']:.3f}" if v.get("ratio") is not None else "–"
                pts = f"{m['n']}/{v['held_out']}" + (f" (baseline {b['n']})" if b["n"] != m["n"] else "")
                lines.append(f"| {set_name} | {label} | {shown_model} | {tname} | {pts} | {mm} | {bb} | {ratio} | {verdict(rule, t, model, v)} |")
    print("\n".join(lines))
    print()
    print("Commands (sets imported with `powerperf import datasets/NAME.toml -o NAME`; timings on this machine):")
    print()
    print("\n".join(cmds))
    if a.json:
        with open(a.json, "w") as f:
            json.dump(raw, f, indent=1)


if __name__ == "__main__":
    main()
