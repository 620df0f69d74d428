"""Read an OTF2 archive written by `powerperf export --format otf2` with OTF2's own Python
reader (Debian's python3-otf2, for /usr/bin/python3) and check it: Enter/Leave balanced and
properly nested per location, times monotonic per location. Prints a JSON summary (enters per
region and their deepest nesting, metric events per metric with unit and mode, locations,
location groups, system tree nodes, the archive's creator and description) on stdout; exits
1 with the problems on stderr.

Usage: /usr/bin/python3 otf2_check.py DIR/traces.otf2
"""
import collections
import json
import sys

import otf2


def main(path):
    errors = []
    enters = collections.Counter()
    depth = collections.Counter()
    metrics = collections.Counter()
    per_location = collections.Counter()
    stacks = collections.defaultdict(list)
    last = {}
    with otf2.reader.open(path) as tr:
        for loc, ev in tr.events:
            key = loc.name
            if ev.time < last.get(key, 0):
                errors.append(f"time goes back on {key}")
            last[key] = ev.time
            if isinstance(ev, otf2.events.Enter):
                stacks[key].append(ev.region.name)
                enters[ev.region.name] += 1
                depth[ev.region.name] = max(depth[ev.region.name], len(stacks[key]))
                per_location[key] += 1
            elif isinstance(ev, otf2.events.Leave):
                if not stacks[key] or stacks[key][-1] != ev.region.name:
                    errors.append(f"{key}: leave {ev.region.name} with {stacks[key][-1:]} open")
                else:
                    stacks[key].pop()
            elif isinstance(ev, otf2.events.Metric):
                for m in ev.metric.members:
                    metrics[f"{m.name} [{m.unit}] {m.metric_mode}"] += 1
        defs = tr.definitions
        summary = {
            "enters": dict(enters),
            "depth": dict(depth),
            "metrics": dict(metrics),
            "enters_per_location": dict(per_location),
            "locations": sorted(f"{l.name} ({l.type})" for l in defs.locations),
            "location_groups": sorted(f"{g.name} ({g.location_group_type})" for g in defs.location_groups),
            "system_tree_nodes": sorted(n.name for n in defs.system_tree_nodes),
        }
    for k, st in stacks.items():
        if st:
            errors.append(f"{k}: {st} never left")
    print(json.dumps(summary, indent=1, sort_keys=True))
    if errors:
        print("\n".join(errors[:50]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
