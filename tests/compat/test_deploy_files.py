"""The container files, read as Docker and Kubernetes would (no Docker here): the image
creates and owns its data and WAL directories for uid 10001, exposes every door and
builds dependencies in a layer of their own; the StatefulSet runs as that uid with
fsGroup, has a startup probe, resources, a PodDisruptionBudget, anti-affinity, and
advertises its stable name rather than 0.0.0.0; its first three pods found the cluster
with static peers and a pod added by scaling up joins it (`--join`)."""

import re
import subprocess
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
UID = 10001


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(instruction, arguments) of deploy/Dockerfile, continuation lines joined."""
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    joined = re.sub(r"\\\n", " ", text)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        word, _, rest = line.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def final_stage(instructions):
    starts = [i for i, (word, _) in enumerate(instructions) if word == "FROM"]
    return instructions[starts[-1]:]


def documented_door_ports() -> dict[str, int]:
    """The default ports deploy/quiver.toml documents for each door."""
    text = (ROOT / "deploy" / "quiver.toml").read_text()
    ports = {}
    for section in ("http", "pg", "flight"):
        block = re.search(rf"^\[{section}\]\n(.*?)(?=^\[|\Z)", text, re.S | re.M)
        assert block, f"[{section}] documented in quiver.toml"
        addr = re.search(r'^#?\s*addr\s*=\s*"[^"]*:(\d+)"', block.group(1), re.M)
        assert addr, f"{section}.addr documented"
        ports[section] = int(addr.group(1))
    return ports


def test_image_owns_its_directories_and_exposes_every_door():
    stage = final_stage(dockerfile_instructions())
    runs = " ".join(rest for word, rest in stage if word == "RUN")
    for d in ("/var/lib/quiver/data", "/var/lib/quiver/wal"):
        assert d in runs, f"{d} created in the image"
    assert re.search(rf"chown -R {UID}:{UID} /var/lib/quiver", runs), runs
    assert f"--uid {UID}" in runs
    users = [rest for word, rest in stage if word == "USER"]
    assert users and users[-1].split(":")[0] in (str(UID), "quiver"), users
    exposed = {int(p) for word, rest in stage if word == "EXPOSE" for p in rest.split()}
    assert set(documented_door_ports().values()) <= exposed, exposed
    env = " ".join(rest for word, rest in stage if word == "ENV")
    assert "QUIVER_PG_ADDR=0.0.0.0:5433" in env and "QUIVER_FLIGHT_ADDR=0.0.0.0:8082" in env
    volumes = " ".join(rest for word, rest in stage if word == "VOLUME")
    assert "/var/lib/quiver/data" in volumes and "/var/lib/quiver/wal" in volumes


def test_image_builds_dependencies_in_a_cached_layer():
    instructions = dockerfile_instructions()
    build = instructions[: [i for i, (w, _) in enumerate(instructions) if w == "FROM"][-1]]
    copy_all = next(i for i, (w, rest) in enumerate(build) if w == "COPY" and rest.startswith(". "))
    before = build[:copy_all]
    copied = " ".join(rest for word, rest in before if word == "COPY")
    assert "Cargo.toml" in copied and "Cargo.lock" in copied
    # Every workspace member's manifest is there before the sources.
    members = re.search(r"members\s*=\s*\[(.*?)\]", (ROOT / "Cargo.toml").read_text(), re.S)
    for member in re.findall(r'"([^"]+)"', members.group(1)):
        if member != ".":
            assert f"{member}/Cargo.toml" in copied, member
    assert any(w == "RUN" and "cargo build" in rest for w, rest in before), "deps built first"
    assert any(w == "RUN" and "cargo build" in rest for w, rest in build[copy_all:])


def test_dockerignore_keeps_build_output_and_history_out():
    lines = {
        l.strip().rstrip("/")
        for l in (ROOT / ".dockerignore").read_text().splitlines()
        if l.strip() and not l.startswith("#")
    }
    for needed in ("target", ".git"):
        assert needed in lines, lines


def statefulset_documents() -> dict[str, dict]:
    docs = list(yaml.safe_load_all((ROOT / "deploy" / "k8s" / "statefulset.yaml").read_text()))
    return {d["kind"]: d for d in docs if d}


def test_statefulset_runs_as_the_image_user_with_probes_limits_and_spread():
    docs = statefulset_documents()
    sts = docs["StatefulSet"]
    pod = sts["spec"]["template"]["spec"]
    security = pod["securityContext"]
    assert security["fsGroup"] == UID and security["runAsUser"] == UID
    assert security["runAsNonRoot"] is True
    [container] = pod["containers"]
    assert container["startupProbe"]["httpGet"]["path"] == "/health"
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300, "a cold start has time"
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind]), kind
    anti = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["topologyKey"] == "kubernetes.io/hostname"
    assert anti[0]["labelSelector"]["matchLabels"] == sts["spec"]["selector"]["matchLabels"]
    pdb = docs["PodDisruptionBudget"]
    assert pdb["spec"]["selector"] == sts["spec"]["selector"]
    assert pdb["spec"].get("maxUnavailable") == 1 or pdb["spec"].get("minAvailable") == 2


def test_statefulset_advertises_its_stable_name_and_opens_every_door():
    docs = statefulset_documents()
    sts = docs["StatefulSet"]
    [container] = sts["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    names = [e["name"] for e in container["env"]]
    assert names.index("POD_NAME") < names.index("QUIVER_CLUSTER_ADVERTISE_ADDR"), "defined first"
    service = sts["spec"]["serviceName"]
    advertise = env["QUIVER_CLUSTER_ADVERTISE_ADDR"]["value"]
    assert advertise == f"http://$(POD_NAME).{service}:8000", advertise
    # The same form as the node's --peers entry, so its membership names one address.
    assert f"http://quiver-0.{service}:8000" in " ".join(container["args"])
    ports = {p["containerPort"] for p in container["ports"]}
    assert set(documented_door_ports().values()) <= ports, ports
    svc_ports = {p["port"] for p in docs["Service"]["spec"]["ports"]}
    assert ports <= svc_ports, svc_ports
    assert docs["Service"]["spec"]["clusterIP"] == "None"


def node_command_of_pod(pod: str) -> list[str]:
    """The `quiver` command line the StatefulSet's shell script runs in pod `pod`, with
    the binary replaced by `echo` (run by the same /bin/sh the image has)."""
    [container] = statefulset_documents()["StatefulSet"]["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["/bin/sh", "-c"], container["command"]
    [script] = container["args"]
    assert "exec /usr/local/bin/quiver serve" in script
    script = script.replace("exec /usr/local/bin/quiver", "exec echo quiver")
    out = subprocess.run(["/bin/sh", "-c", script], env={"HOSTNAME": pod, "PATH": "/usr/bin:/bin"},
                         capture_output=True, text=True, timeout=10, check=True)
    return out.stdout.split()


def flag(words: list[str], name: str) -> str | None:
    return words[words.index(name) + 1] if name in words else None


def test_founding_pods_use_static_peers_and_a_scaled_up_pod_joins():
    for ordinal in range(3):
        words = node_command_of_pod(f"quiver-{ordinal}")
        assert flag(words, "--node-id") == str(ordinal + 1), words
        assert flag(words, "--peers") == (
            "1=http://quiver-0.quiver:8000,2=http://quiver-1.quiver:8000,3=http://quiver-2.quiver:8000"
        ), words
        assert "--join" not in words, words
    for ordinal in (3, 7):
        words = node_command_of_pod(f"quiver-{ordinal}")
        assert flag(words, "--node-id") == str(ordinal + 1), words
        assert flag(words, "--join") == "http://quiver-0.quiver:8000", words
        # The node refuses --join beside --peers: the script never passes both.
        assert "--peers" not in words, words
    assert flag(words, "--wal-dir") == "/var/lib/quiver/wal", words
    assert flag(words, "--pg-addr") == "0.0.0.0:5433", words
