"""Decode a Perfetto trace written by `powerperf export --format perfetto` with the protos of
the `perfetto` PyPI package (perfetto.protos.perfetto.trace.perfetto_trace_pb2, with
`protobuf`) and check it: every track declared (a TrackDescriptor packet) before an event
uses it, slice begins and ends balanced per track, timestamps monotonic per track, counter
values only on counter tracks, and names interned before use. Prints a JSON summary (counts
of slice begins per name and their deepest nesting, tracks, counters, flows, instants) on
stdout; exits 1 with the problems on stderr.

Usage: python3 perfetto_check.py TRACE.pftrace
"""
import collections
import json
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb


def main(path):
    trace = pb.Trace()
    with open(path, "rb") as f:
        trace.ParseFromString(f.read())
    tracks = {}
    names, cats, arg_names, arg_values = {}, {}, {}, {}
    stacks = collections.defaultdict(list)
    last = {}
    begins = collections.Counter()
    depth = collections.Counter()
    per_track = collections.Counter()
    counters = collections.Counter()
    flow_src, flow_dst = {}, {}
    instants = []
    errors = []
    for i, p in enumerate(trace.packet):
        if p.HasField("interned_data"):
            for n in p.interned_data.event_names:
                names[n.iid] = n.name
            for c in p.interned_data.event_categories:
                cats[c.iid] = c.name
            for a in p.interned_data.debug_annotation_names:
                arg_names[a.iid] = a.name
            for v in p.interned_data.debug_annotation_string_values:
                arg_values[v.iid] = v.str.decode()
        if p.HasField("track_descriptor"):
            d = p.track_descriptor
            if d.uuid in tracks:
                errors.append(f"packet {i}: track {d.uuid} declared twice")
            if d.HasField("parent_uuid") and d.parent_uuid not in tracks:
                errors.append(f"packet {i}: parent {d.parent_uuid} of {d.uuid} not declared yet")
            if d.HasField("counter"):
                kind, name = "counter", d.name
                if not d.counter.unit_name:
                    errors.append(f"counter track {d.name} has no unit")
            elif d.HasField("process"):
                kind, name = "process", d.process.process_name
            elif d.HasField("thread"):
                kind, name = "thread", d.thread.thread_name
            else:
                kind, name = "track", d.name
            tracks[d.uuid] = (kind, name)
        if not p.HasField("track_event"):
            continue
        e = p.track_event
        u = e.track_uuid
        if u not in tracks:
            errors.append(f"packet {i}: event on track {u}, not declared before")
            continue
        kind, tname = tracks[u]
        if p.timestamp < last.get(u, 0):
            errors.append(f"packet {i}: time goes back on {tname} ({p.timestamp} < {last[u]})")
        last[u] = p.timestamp
        if e.HasField("name_iid") and e.name_iid not in names:
            errors.append(f"packet {i}: name iid {e.name_iid} not interned before")
        name = names.get(e.name_iid) if e.HasField("name_iid") else e.name
        ann = {}
        for a in e.debug_annotations:
            key = arg_names.get(a.name_iid) if a.HasField("name_iid") else a.name
            kind = a.WhichOneof("value")
            if key is None or (kind == "string_value_iid" and a.string_value_iid not in arg_values):
                errors.append(f"packet {i}: an argument name or value not interned before")
                continue
            ann[key] = arg_values[a.string_value_iid] if kind == "string_value_iid" else getattr(a, kind)
        # Extra counter values (several counters at one timestamp) go to counter tracks too.
        if len(e.extra_double_counter_track_uuids) != len(e.extra_double_counter_values):
            errors.append(f"packet {i}: extra counter values and tracks differ in number")
        for x in e.extra_double_counter_track_uuids:
            xk, xn = tracks.get(x, (None, None))
            if xk != "counter":
                errors.append(f"packet {i}: extra counter value on {xk} track {x}")
                continue
            if p.timestamp < last.get(x, 0):
                errors.append(f"packet {i}: time goes back on {xn}")
            last[x] = p.timestamp
            counters[xn] += 1
        if e.type == pb.TrackEvent.TYPE_COUNTER:
            if kind != "counter":
                errors.append(f"packet {i}: counter value on {kind} track {tname}")
            counters[tname] += 1
            continue
        if kind == "counter":
            errors.append(f"packet {i}: {e.type} event on counter track {tname}")
        st = stacks[u]
        if e.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
            for fid in e.flow_ids:
                flow_src[fid] = [n for (n, c) in st if c == "region"]
            for fid in e.terminating_flow_ids:
                flow_dst[fid] = ann.get("region")
            st.append((name, cats.get(e.category_iids[0]) if e.category_iids else None))
            begins[name] += 1
            depth[name] = max(depth[name], len(st))
            per_track[tname] += 1
        elif e.type == pb.TrackEvent.TYPE_SLICE_END:
            if not st:
                errors.append(f"packet {i}: end without begin on {tname}")
            else:
                st.pop()
        elif e.type == pb.TrackEvent.TYPE_INSTANT:
            instants.append({"name": name, "track": tname, **{k: v for k, v in ann.items()}})
    for u, st in stacks.items():
        if st:
            errors.append(f"{tracks[u][1]}: {len(st)} begin(s) without end")
    # A launch's innermost region on its thread against the region its activity was given.
    matched = sum(
        1
        for fid, regions in flow_src.items()
        if fid in flow_dst and regions and flow_dst[fid] and flow_dst[fid].split("/")[-1] == regions[-1]
    )
    summary = {
        "processes": sorted(n for k, n in tracks.values() if k == "process"),
        "threads": sum(1 for k, _ in tracks.values() if k == "thread"),
        "streams": sorted(n for k, n in tracks.values() if k == "track"),
        "counter_tracks": sorted(n for k, n in tracks.values() if k == "counter"),
        "counter_values": sum(counters.values()),
        "begins": dict(begins),
        "depth": dict(depth),
        "slices_per_track": dict(per_track),
        "flows": len(flow_src),
        "flows_ended": sum(1 for f in flow_src if f in flow_dst),
        "flows_launched_in_a_region": sum(1 for f, r in flow_src.items() if f in flow_dst and r),
        "flows_from_the_activitys_region": matched,
        "activities_with_a_region": sum(1 for r in flow_dst.values() if r),
        "instants": instants,
    }
    print(json.dumps(summary, indent=1, sort_keys=True))
    if errors:
        print("\n".join(errors[:50]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
