"""Adds a sixth node to a loaded 5-node cluster (8 data groups, replication 3), then
`quiver cluster rebalance` (or, with --join, started with `quiver serve --join URL`
alone, which adds it and rebalances by itself); checks that every acknowledged row is
stored exactly once (a 504 is resent with its Idempotency-Key) and prints each node's
share of the bytes.
Usage: python3 benches/grow_cluster.py PATH_TO_QUIVER [--join]
(uses ports 18100-18105, /tmp/grow)"""
import json, os, random, shutil, signal, subprocess, sys, threading, time, urllib.request

BIN = sys.argv[1]
JOIN = "--join" in sys.argv[2:]
ROOT = "/tmp/grow/run"
TOKEN = "grow-token-0123456789"
SECRET = "grow-secret-0123456789abcdef"
shutil.rmtree(ROOT, ignore_errors=True)
os.makedirs(ROOT)
ports = [18100 + i for i in range(6)]
peers5 = ",".join(f"{i+1}=http://127.0.0.1:{ports[i]}" for i in range(5))
procs = {}

def start(i, join=None):
    env = dict(os.environ, QUIVER_CLUSTER_NODE_ID=str(i + 1),
               QUIVER_CLUSTER_SECRET=SECRET, QUIVER_BOOTSTRAP_TOKEN=TOKEN,
               QUIVER_STORAGE_FLUSH_AGE_MS="2000", QUIVER_LOG_LEVEL="warn")
    if join:
        env["QUIVER_CLUSTER_JOIN"] = join  # nothing else of the cluster's settings
    else:
        env.update(QUIVER_CLUSTER_PEERS=peers5, QUIVER_CLUSTER_DATA_GROUPS="8",
                   QUIVER_CLUSTER_REPLICATION="3")
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

import atexit
atexit.register(lambda: [p.send_signal(signal.SIGKILL) for p in procs.values()])
for i in range(5):
    start(i)
for i in range(5):
    wait_ready(i)

MEAS = 16
ROWS = 50
acked, unknown, refused, resent = [], [], 0, 0
stop = threading.Event()
lock = threading.Lock()
def writer(w):
    global refused, resent
    b = w
    while not stop.is_set():
        lines = []
        for m in range(MEAS):
            for r in range(ROWS):
                t = 1_700_000_000_000_000_000 + (b * 1000 + r) * 1_000_000
                lines.append(f"m{m},host=h{r} v={b},b={b}i {t}")
        body = "\n".join(lines).encode()
        # A 504 (some part's outcome unknown) is resent with the same Idempotency-Key
        # until it is acknowledged: each row must then be stored exactly once.
        for attempt in range(20):
            node = random.choice([i for i in procs])
            s, text = call(node, "/write?db=db", body, timeout=60, key=f"batch-{b}")
            with lock:
                if s == 204:
                    acked.append(b)
                    break
                if s in (429, 503) or (s == 0 and "refused" in text):
                    refused += 1
                    if attempt == 0:
                        break  # refused whole: nothing written, the batch is dropped
                    continue
                resent += 1
                if len(unknown) < 5:
                    unknown.append((b, s, text[:600]))
        b += 4
threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
for t in threads: t.start()
time.sleep(15)
def held_by_6():
    s, text = call(5, "/api/v1/cluster/groups", timeout=5)
    if s != 200:
        return 0
    return sum(1 for g in json.loads(text)["groups"] if g.get("held_here") and g["id"] > 0)

if JOIN:
    t0 = time.time()
    start(5, join=f"http://127.0.0.1:{ports[0]}")
    wait_ready(5)
    t1 = time.time()
    # 24 replicas over 6 nodes: node 6 should end up holding 4.
    first = None
    while time.time() - t0 < 300 and held_by_6() < 4:
        if first is None and held_by_6() > 0:
            first = time.time()
        time.sleep(0.2)
    t2 = time.time()
    print("serve --join: ready %.1f s after start; first replica held at %s s; %d replicas held %.1f s after start"
          % (t1 - t0, "%.1f" % (first - t0) if first else "-", held_by_6(), t2 - t0))
else:
    start(5)
    t0 = time.time()
    s1 = call(0, "/api/v1/cluster/add-learner", {"node_id": 6, "addr": f"http://127.0.0.1:{ports[5]}"})
    s2 = call(0, "/api/v1/cluster/promote", {"node_ids": [6]})
    wait_ready(5)
    t1 = time.time()
    s3 = call(5, "/api/v1/cluster/rebalance", {})
    t2 = time.time()
    print("add-learner", s1[0], "promote", s2[0], "joined in %.1f s" % (t1 - t0))
    print("rebalance", s3[0], s3[1][:400], "in %.1f s" % (t2 - t1))
time.sleep(10)
stop.set()
for t in threads: t.join()
print(f"acked {len(acked)} batches of {MEAS * ROWS} rows, refused {refused}, resent after 504/other {resent}; first: {unknown[:2]}")
time.sleep(3)
bad = 0
for node in (0, 5):
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
            print(f"node {node+1} m{m}: {len(missing)} acked batches not stored exactly once, e.g. {missing[:3]} -> {[got.get(b) for b in missing[:3]]}")
print("checked on nodes 1 and 6:", "every acked row stored once" if bad == 0 else f"{bad} tables wrong")
s, text = call(0, "/api/v1/cluster/groups")
for g in json.loads(text)["groups"]:
    print("group", g["id"], "members", g["members"])
def du(p):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(p) for f in fs)
sizes = [du(f"{ROOT}/n{i+1}/groups") for i in range(6)]
total = sum(sizes) / 3
print("bytes under groups/ per node:", sizes, "share of one copy:", [round(s / total, 2) for s in sizes])
for p in procs.values():
    p.send_signal(signal.SIGKILL)
