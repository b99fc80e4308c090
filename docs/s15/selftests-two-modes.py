import sys, json
sys.path.insert(0, '.')
from harness import selftests as st
from harness.paths import LAYOUT
req = st.build_request(LAYOUT)
b = st.build(req)
progs = list(st.runnable(b.built))
initrd = st.archive(req, progs, LAYOUT)
import concurrent.futures as cf
modes = sys.argv[1:]
with cf.ThreadPoolExecutor(max_workers=2) as pool:
    fs = {m: pool.submit(st.run_mode, m, progs, initrd, None, 1, LAYOUT) for m in modes}
    for m, f in fs.items():
        r = f.result()
        print(m, json.dumps(r, default=str)[:300])
