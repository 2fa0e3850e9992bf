"""Kills a node of a loaded 5-node cluster (8 data groups, replication 3) for good and
measures the re-replication of its replicas (cluster.rereplicate_after_ms): how long
until no group lists the dead node, what the writers saw meanwhile, that every
acknowledged row is stored exactly once, each live node's share of the bytes, and, once
the dead node is started again, how long until it has deleted the copies it held.
Usage: python3 benches/dead_node.py PATH_TO_QUIVER [GRACE_MS]
(uses ports 18200-18204, /tmp/dead_node)"""
import json, os, random, shutil, signal, subprocess, sys, threading, time, urllib.request

BIN = sys.argv[1]
GRACE_MS = int(sys.argv[2]) if len(sys.argv) > 2 else 10000
ROOT = "/tmp/dead_node/run"
TOKEN = "dead-node-token-0123456789"
SECRET = "dead-node-secret-0123456789abcdef"
shutil.rmtree(ROOT, ignore_errors=True)
os.makedirs(ROOT)
ports = [18200 + i for i in range(5)]
peers = ",".join(f"{i+1}=http://127.0.0.1:{ports[i]}" for i in range(5))
procs = {}

def start(i):
    env = dict(os.environ, QUIVER_CLUSTER_NODE_ID=str(i + 1), QUIVER_CLUSTER_PEERS=peers,
               QUIVER_CLUSTER_SECRET=SECRET, QUIVER_BOOTSTRAP_TOKEN=TOKEN,
               QUIVER_CLUSTER_DATA_GROUPS="8", QUIVER_CLUSTER_REPLICATION="3",
               QUIVER_CLUSTER_REREPLICATE_AFTER_MS=str(GRACE_MS),
               QUIVER_STORAGE_FLUSH_AGE_MS="2000", QUIVER_LOG_LEVEL="warn")
    log = open(f"{ROOT}/n{i+1}.log", "a")
    procs[i] = subprocess.Popen([BIN, "serve", "--http-addr", f"127.0.0.1:{ports[i]}",
                                 "--data-dir", f"{ROOT}/n{i+1}"], env=env, stdout=log, stderr=log)

def call(i, path, body=None, timeout=600, key=None):
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json", "x-arc-database": "db"}
    if key:
        headers["Idempotency-Key"] = key
    req = urllib.request.Request(f"http://127.0.0.1:{ports[i]}{path}", data=data, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except Exception as e:
        return 0, str(e)

def wait_ready(i, t=60):
    end = time.time() + t
    while time.time() < end:
        if call(i, "/ready", timeout=2)[0] == 200:
            return
        time.sleep(0.2)
    raise SystemExit(f"node {i+1} not ready")

def groups_holding(node_id):
    s, text = call(0, "/api/v1/cluster/groups", timeout=5)
    if s != 200:
        return None
    return [g["id"] for g in json.loads(text)["groups"]
            if g.get("role") == "data" and node_id in g["members"]]

import atexit
atexit.register(lambda: [p.send_signal(signal.SIGKILL) for p in procs.values()])
for i in range(5):
    start(i)
for i in range(5):
    wait_ready(i)

MEAS, ROWS = 16, 50
acked, statuses, resent = [], {}, 0
stop = threading.Event()
lock = threading.Lock()
live = [0, 1, 2, 3, 4]
def writer(w):
    global resent
    b = w
    while not stop.is_set():
        body = "\n".join(
            f"m{m},host=h{r} v={b},b={b}i {1_700_000_000_000_000_000 + (b * 1000 + r) * 1_000_000}"
            for m in range(MEAS) for r in range(ROWS)).encode()
        # Anything but 204 is resent with the same Idempotency-Key until acknowledged.
        for attempt in range(40):
            s, text = call(random.choice(live), "/write?db=db", body, timeout=60, key=f"batch-{b}")
            with lock:
                if s == 204:
                    acked.append(b)
                    break
                statuses[s] = statuses.get(s, 0) + 1
                resent += 1
            time.sleep(0.1)
        b += 4
threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
for t in threads: t.start()
time.sleep(15)
held = groups_holding(5)
procs[4].send_signal(signal.SIGKILL)
live.remove(4)
killed = time.time()
with lock:
    before = dict(statuses)
while True:
    now_held = groups_holding(5)
    if now_held == []:
        break
    if time.time() - killed > 600:
        raise SystemExit(f"node 5 still holds {now_held} after 600 s")
    time.sleep(0.5)
repaired = time.time() - killed
time.sleep(5)
stop.set()
for t in threads: t.join()
with lock:
    after = {k: v - before.get(k, 0) for k, v in statuses.items()}
print(f"grace {GRACE_MS} ms; node 5 held groups {held}; every group off node 5 {repaired:.1f} s after the kill")
print(f"acked {len(acked)} batches of {MEAS * ROWS} rows; answers before a 204, after the kill: {after}; before: {before}")
bad = 0
for node in (0, 1):
    for m in range(MEAS):
        s, text = call(node, "/api/v1/query", {"sql": f"SELECT b, count(*) FROM m{m} GROUP BY b"})
        answer = json.loads(text) if text.startswith("{") else {}
        if "data" not in answer:
            bad += 1
            print(f"node {node+1} m{m}: query failed {s} {text[:300]}")
            continue
        got = {row[0]: row[1] for row in answer["data"]}
        missing = [b for b in acked if got.get(b) != ROWS]
        if missing:
            bad += 1
            print(f"node {node+1} m{m}: {len(missing)} acked batches not stored exactly once, e.g. {missing[:3]}")
print("checked on nodes 1 and 2:", "every acked row stored once" if bad == 0 else f"{bad} tables wrong")
def du(p):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(p) for f in fs)
sizes = [du(f"{ROOT}/n{i+1}/groups") for i in range(4)]
total = sum(sizes) / 3
print("bytes under groups/ of nodes 1-4:", sizes, "share of one copy:", [round(s / total, 2) for s in sizes])
start(4)
wait_ready(4)
back = time.time()
while True:
    dirs = [d for d in os.listdir(f"{ROOT}/n5/groups") if d.isdigit() and int(d) in (held or [])]
    if not dirs:
        break
    if time.time() - back > 120:
        print("node 5 still holds copies of", dirs)
        break
    time.sleep(0.5)
print(f"node 5 back: its copies deleted {time.time() - back:.1f} s after it was ready")
for p in procs.values():
    p.send_signal(signal.SIGKILL)
