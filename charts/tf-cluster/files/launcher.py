"""tf-cluster launcher: wraps a TensorFlow task's command.

Standard library only, so it runs in any image with Python 3.8+.

    python3 launcher.py -- <command> [args...]    run a task
    python3 launcher.py --check                    `helm test`: check the run

1. Waits until every peer address in TF_CONFIG resolves (headless Service DNS),
   logging the missing ones every few seconds; gives up after
   TF_CLUSTER_PEER_TIMEOUT seconds (exit 4).
2. Runs the command, forwarding SIGTERM/SIGINT to it (TF can checkpoint in the
   pod's grace period); a child still running TF_CLUSTER_STOP_GRACE seconds later is
   killed and the launcher exits 128+signal. (In multi-worker runs TensorFlow's
   coordination service catches SIGTERM, so without this a deleted pod trains on
   until the kubelet's SIGKILL and may even exit 0, as measured on a real node.)
3. Echoes each new report of Vertex AI's cloudml-hypertune library (the metrics file
   it writes in the pod's /tmp, CLOUD_ML_HP_METRIC_FILE) to its stdout as a
   TF_CLUSTER_METRICS line, so the pod's log carries what the program reported.
4. When TF_CLUSTER_STOP_WITH_LEADER=true (ps, ParameterServer workers, the
   evaluator) it polls the leading Job (chief, else worker) through the
   Kubernetes API with the pod's token; when that Job is Complete it stops the
   child and exits 0, when it Failed it stops the child and exits 3.

Exit codes:
    0     the command succeeded, or the leading Job completed and the child was stopped
          (or had completed before this task started: a late replacement exits at once)
    3     the leading Job failed; this task was stopped (fails this Job at once)
    4     peers did not resolve within TF_CLUSTER_PEER_TIMEOUT (fails this Job at once)
    5     the launcher was misconfigured (no command, unreadable TF_CONFIG)
    N     otherwise the command's own exit code (128+signal if it was killed)

Environment (set by the chart): TF_CONFIG, TF_CLUSTER_ROLE, TF_TASK_INDEX,
TF_CLUSTER_NAMESPACE, TF_CLUSTER_LEADER_JOB, TF_CLUSTER_STOP_WITH_LEADER,
TF_CLUSTER_WAIT_FOR_PEERS, TF_CLUSTER_PEER_TIMEOUT, TF_CLUSTER_POLL_SECONDS,
TF_CLUSTER_STOP_GRACE. When TF_NUM_INTRAOP_THREADS is set (the chart derives it
from the CPU limit) and TF_NUM_INTEROP_THREADS is not, the child gets
TF_NUM_INTEROP_THREADS=max(2, intra-op). For runs outside Kubernetes (tf-cluster run-local),
TF_CLUSTER_LEADER_STATUS_FILE replaces the API: a file holding the leading
Job's condition (Complete / Failed), empty while it runs.
"""
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

EXIT_LEADER_FAILED = 3
EXIT_PEERS_TIMEOUT = 4
EXIT_CONFIG = 5

SA_DIR = os.environ.get("TF_CLUSTER_SA_DIR", "/var/run/secrets/kubernetes.io/serviceaccount")
SUCCESS = ("Complete", "SuccessCriteriaMet")
FAILURE = ("Failed", "FailureTarget")


def env(name, default=""):
    return os.environ.get(name, default)


def task_name():
    return "%s-%s" % (env("TF_CLUSTER_ROLE", "task"), env("TF_TASK_INDEX", "0"))


def log(msg):
    sys.stderr.write("[launcher %s] %s\n" % (task_name(), msg))
    sys.stderr.flush()


class ConfigError(Exception):
    pass


def peer_hosts(tf_config):
    """Every host named in TF_CONFIG's cluster, in order, without duplicates."""
    if not tf_config:
        return []
    try:
        cluster = json.loads(tf_config).get("cluster", {})
    except ValueError as e:
        raise ConfigError("TF_CONFIG is not valid JSON: %s" % e)
    hosts = []
    for role in sorted(cluster):
        tasks = cluster[role]
        addresses = tasks.values() if isinstance(tasks, dict) else tasks
        for address in addresses:
            host = address.rsplit(":", 1)[0]
            if host not in hosts:
                hosts.append(host)
    return hosts


def resolves(host):
    try:
        socket.getaddrinfo(host, None)
        return True
    except (socket.gaierror, UnicodeError):
        return False


def wait_for_peers(hosts, timeout, interval=5.0, give_up=None):
    """Return [] when all resolve, else the hosts still missing at the timeout (or when
    `give_up()` says the wait is pointless: the leading Job already finished)."""
    start = time.monotonic()
    last_log = start
    missing = list(hosts)
    while True:
        missing = [h for h in missing if not resolves(h)]
        if not missing:
            log("all %d peer(s) resolve after %.1fs" % (len(hosts), time.monotonic() - start))
            return []
        now = time.monotonic()
        if now - start >= timeout:
            return missing
        if now - last_log >= interval:
            if give_up is not None and give_up():
                return missing
            log("waiting for %d/%d peer(s) to resolve (%ds/%ds): %s" % (
                len(missing), len(hosts), now - start, timeout, ", ".join(missing[:10])
                + (" ..." if len(missing) > 10 else "")))
            last_log = now
        time.sleep(min(1.0, max(0.05, timeout / 50.0)))


# ------------------------------------------------------------ leader status

def leader_condition_from_api(namespace, job):
    """The leading Job's finished condition type ("Complete", "Failed", ...) or ""."""
    host, port = env("KUBERNETES_SERVICE_HOST"), env("KUBERNETES_SERVICE_PORT", "443")
    if not host:
        raise ConfigError("not in a Kubernetes pod (KUBERNETES_SERVICE_HOST unset) and "
                          "TF_CLUSTER_LEADER_STATUS_FILE not given")
    if ":" in host:
        host = "[%s]" % host
    with open(os.path.join(SA_DIR, "token")) as f:
        token = f.read().strip()
    ctx = ssl.create_default_context(cafile=os.path.join(SA_DIR, "ca.crt"))
    url = "https://%s:%s/apis/batch/v1/namespaces/%s/jobs/%s" % (host, port, namespace, job)
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token,
                                               "Accept": "application/json"})
    with urllib.request.urlopen(req, timeout=10, context=ctx) as resp:
        status = json.load(resp).get("status", {})
    return condition_of(status)


def condition_of(status):
    """Pick the decisive condition by type (never by position: 1.31+ adds SuccessCriteriaMet)."""
    true_types = [c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"]
    for t in FAILURE:
        if t in true_types:
            return "Failed"
    for t in SUCCESS:
        if t in true_types:
            return "Complete"
    return ""


def leader_condition():
    path = env("TF_CLUSTER_LEADER_STATUS_FILE")
    if path:
        try:
            with open(path) as f:
                return f.read().strip()
        except OSError:
            return ""
    return leader_condition_from_api(env("TF_CLUSTER_NAMESPACE", "default"),
                                     env("TF_CLUSTER_LEADER_JOB"))


def leader_condition_or_empty():
    """leader_condition(), with "" when the API cannot be read (the caller moves on)."""
    try:
        return leader_condition()
    except (ConfigError, urllib.error.URLError, OSError, ValueError):
        return ""


def watch_leader(poll, on_finished, stop_event):
    job = env("TF_CLUSTER_LEADER_JOB") or "leader"
    log("will stop when Job %s finishes (checked every %ss)" % (job, poll))
    errors = 0
    while not stop_event.wait(poll):
        try:
            cond = leader_condition()
            errors = 0
        except (urllib.error.URLError, OSError, ValueError) as e:
            errors += 1
            if errors == 1 or errors % 12 == 0:
                log("cannot read Job %s yet (%s); retrying" % (job, e))
            continue
        if cond:
            log("Job %s is %s" % (job, cond))
            on_finished(cond)
            return


# ------------------------------------------------------------ running

def echo_metrics(stop_event, interval=2.0):
    """Print each report of the hypertune metrics file not printed yet (the library rewrites the
    file with its last 100 reports, each with a timestamp) whenever the file changes, and once
    more after the child ends."""
    path = env("CLOUD_ML_HP_METRIC_FILE", "/tmp/hypertune/output.metrics")
    seen, last = None, -1.0
    while True:
        stopping = stop_event.wait(interval)
        try:
            st = os.stat(path)
            key = (st.st_mtime, st.st_size)
        except OSError:
            key = None
        if key is not None and key != seen:
            seen = key
            try:
                with open(path) as f:
                    lines = [ln.strip() for ln in f.read().splitlines() if ln.strip()]
            except OSError:
                lines = []
            for line in lines:
                try:
                    stamp = float(json.loads(line).get("timestamp", 0))
                except (ValueError, AttributeError, TypeError):
                    continue
                if stamp > last:
                    last = stamp
                    # on a line of its own even when the program left a progress bar open
                    sys.stdout.write("\nTF_CLUSTER_METRICS %s\n" % line)
            sys.stdout.flush()
        if stopping:
            return


def stop_child(proc, grace):
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        log("child still running %ss after SIGTERM; killing it" % grace)
        proc.kill()
        proc.wait()


def run(argv):
    if not argv:
        log("no command given: usage: launcher.py -- <command> [args...]")
        return EXIT_CONFIG
    try:
        hosts = peer_hosts(env("TF_CONFIG"))
    except ConfigError as e:
        log(str(e))
        return EXIT_CONFIG
    stops_with_leader = env("TF_CLUSTER_STOP_WITH_LEADER") == "true"
    finished = {}

    def leader_finished():
        """A task (re)started after the leading Job ended has nothing to serve: say so, exit."""
        if stops_with_leader and not finished:
            cond = leader_condition_or_empty()
            if cond:
                finished["leader"] = cond
        return bool(finished)

    def finished_exit():
        log("Job %s is already %s; nothing to do" % (env("TF_CLUSTER_LEADER_JOB") or "leader", finished["leader"]))
        return 0 if finished["leader"] == "Complete" else EXIT_LEADER_FAILED

    if leader_finished():
        return finished_exit()
    if hosts and env("TF_CLUSTER_WAIT_FOR_PEERS", "true") == "true":
        timeout = float(env("TF_CLUSTER_PEER_TIMEOUT", "600"))
        missing = wait_for_peers(hosts, timeout, give_up=leader_finished)
        if finished:
            return finished_exit()
        if missing:
            log("gave up after %ds: %d peer(s) never resolved: %s. Check that their pods "
                "exist (kubectl get pods) and that the headless Service publishes not-ready "
                "addresses." % (timeout, len(missing), ", ".join(missing)))
            return EXIT_PEERS_TIMEOUT

    if not env("TF_CONFIG"):
        log("TF_CONFIG is not set: this release has one training task, which trains without a "
            "cluster (no gRPC server, no peers), as TFJob does. A program that reads "
            "TF_CONFIG['task'] needs it: set tfConfig.alwaysSet=true.")
    intra = env("TF_NUM_INTRAOP_THREADS")
    if intra.isdigit() and not env("TF_NUM_INTEROP_THREADS"):
        # One inter-op thread deadlocks ParameterServerStrategy's fit (measured, TF 2.21).
        os.environ["TF_NUM_INTEROP_THREADS"] = str(max(2, int(intra)))
    log("starting: %s" % " ".join(argv))
    try:
        proc = subprocess.Popen(argv)
    except OSError as e:
        log("cannot start %s: %s" % (argv[0], e))
        return 127
    outcome = {}
    grace = float(env("TF_CLUSTER_STOP_GRACE", "20"))

    def forward(signum, _frame):
        log("got signal %d; forwarding to the child (it has %ss to exit)" % (signum, grace))
        outcome.setdefault("signal", signum)
        if proc.poll() is None:
            proc.send_signal(signum)
            if "timer" not in outcome:  # TF's coordination service catches SIGTERM and trains on: bound it
                outcome["timer"] = threading.Timer(grace, kill_if_running, args=(signum,))
                outcome["timer"].daemon = True
                outcome["timer"].start()

    def kill_if_running(signum):
        if proc.poll() is None:
            log("child still running %ss after signal %d (TensorFlow catches SIGTERM in multi-worker "
                "runs); killing it" % (grace, signum))
            outcome["killed"] = True
            proc.kill()

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)

    stop_event = threading.Event()
    echo = threading.Thread(target=echo_metrics, daemon=True, args=(stop_event,))
    echo.start()
    if stops_with_leader:
        def on_finished(cond):
            outcome["leader"] = cond
            stop_child(proc, grace)
        threading.Thread(target=watch_leader, daemon=True,
                         args=(float(env("TF_CLUSTER_POLL_SECONDS", "5")), on_finished,
                               stop_event)).start()

    rc = proc.wait()
    stop_event.set()
    echo.join(5)
    if outcome.get("leader") == "Complete":
        log("leading Job completed; task stopped (exit 0)")
        return 0
    if outcome.get("leader") == "Failed":
        log("leading Job failed; task stopped (exit %d)" % EXIT_LEADER_FAILED)
        return EXIT_LEADER_FAILED
    if stops_with_leader and "signal" in outcome and not outcome.get("leader"):
        # Stopped by the pod's termination: when the leading Job has just completed, that is the
        # Job controller ending this (finished) Job's other tasks, not a failure.
        cond = leader_condition_or_empty()
        if cond in SUCCESS:
            log("Job %s is %s; task stopped (exit 0)" % (env("TF_CLUSTER_LEADER_JOB") or "leader", cond))
            return 0
    if outcome.get("killed"):
        rc = 128 + outcome["signal"]  # stopped by the pod's termination, not finished: retry it
        log("task stopped by signal %d before it finished (exit %d)" % (outcome["signal"], rc))
        return rc
    if rc < 0:
        rc = 128 - rc
    log("command exited with %d" % rc)
    return rc


def check():
    """`helm test`: the leading Job must not have failed; while it runs, peers must resolve."""
    job = env("TF_CLUSTER_LEADER_JOB")
    try:
        cond = leader_condition()
    except (ConfigError, urllib.error.URLError, OSError, ValueError) as e:
        print("FAIL: cannot read Job %s: %s" % (job, e))
        return 1
    if cond == "Failed":
        print("FAIL: Job %s failed; see kubectl describe job %s" % (job, job))
        return 1
    if cond == "Complete":
        print("OK: Job %s completed" % job)
        return 0
    missing = wait_for_peers(peer_hosts(env("TF_CONFIG")), float(env("TF_CLUSTER_PEER_TIMEOUT", "60")))
    if missing:
        print("FAIL: Job %s is running but these tasks do not resolve: %s" % (job, ", ".join(missing)))
        return 1
    print("OK: Job %s is running and every task resolves" % job)
    return 0


def main(args):
    if args[:1] == ["--check"]:
        return check()
    if args[:1] == ["--"]:
        args = args[1:]
    return run(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
