#!/usr/bin/env python3
# medians of the throughput rounds in a steer test output: received (sent) pkt/s
import re, sys, statistics as st
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r'\s+(\d+) B round \d+: (.*)', line)
    if not m: continue
    for name, rx, tx in re.findall(r'([a-z][^|()]*?)\s+(\d+) \(\s*(\d+)\)', m.group(2)):
        rows.setdefault((m.group(1), name.strip()), []).append((int(rx), int(tx)))
for (size, name), v in rows.items():
    print(f"{size:>5} B  {name:<24} median rx {st.median(x for x,_ in v):>9.0f}/s  tx {st.median(y for _,y in v):>9.0f}/s  (n={len(v)}, rx min {min(x for x,_ in v)} max {max(x for x,_ in v)})")
