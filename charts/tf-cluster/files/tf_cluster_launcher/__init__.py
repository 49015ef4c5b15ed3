"""tf-cluster launcher: wraps a TensorFlow task's command.

Standard library only, so it runs in any image with Python 3.8+.

    python3 launcher.py -- <command> [args...]    run a task
    python3 launcher.py --check                    `helm test`: check the run

1. Waits for the peers its TensorFlow contacts as it starts (peers_needed: under
   MultiWorkerMirrored the coordination service's leader, under ParameterServer the chief
   waits for every task and the others for none; every TF_CONFIG address for a custom
   strategy): it watches their pods through the API until each has an IP, asks CoreDNS for
   each name as a record type nothing else asks for until it knows it, then looks each name
   up once (headless Service DNS). No name is looked up before its pod exists, so no
   NXDOMAIN lands in CoreDNS' cache (30 s with the addon's Corefile) to stall the start.
   Without the API (run-local, a Role that cannot watch pods) it waits on DNS alone. It logs
   the missing peers and why (no pod, not scheduled, no IP) every few seconds; gives up after
   TF_CLUSTER_PEER_TIMEOUT seconds (exit 4).
2. Runs the command in a process group of its own, forwarding SIGTERM/SIGINT to the
   whole group (so a program a shell started, `sh -c "cd /code && python train.py"`,
   gets it too: TF can checkpoint in the pod's grace period), and waits for all of the
   group; what still runs TF_CLUSTER_STOP_GRACE seconds later is killed and the launcher
   exits 128+signal. What a command that exited left running in its group gets SIGTERM
   and the same grace. (In multi-worker runs TensorFlow's
   coordination service catches SIGTERM, so without this a deleted pod trains on
   until the kubelet's SIGKILL and may even exit 0, as measured on a real node.)
   A signalled command that exits 0 did not finish either (it saved and left, as
   TensorFlow's preemption handling does): the launcher exits 128+signal unless the
   leading Job is complete (the run is over). A signal before the command starts (in
   the peer wait) ends the launcher at once with 128+signal: it is the container's
   PID 1, for which the kernel ignores a signal left at its default action.
3. Echoes each new report of Vertex AI's cloudml-hypertune library (the metrics file
   it writes in the pod's /tmp, CLOUD_ML_HP_METRIC_FILE) to its stdout as a
   TF_CLUSTER_METRICS line, so the pod's log carries what the program reported.
4. When TF_CLUSTER_STOP_WITH_LEADER=true (ps, ParameterServer workers, the
   evaluator) it watches the leading Job (chief, else worker) through the
   Kubernetes API with the pod's token (one LIST, then a WATCH request every 10-20 minutes,
   reconnected with backoff after an API outage), from its start (it may end while this task
   waits for its peers); when that Job is Complete it stops the child and exits 0, when it
   Failed, or was deleted or never existed (no Job of that name for
   TF_CLUSTER_LEADER_MISSING_SECONDS, 60), it stops the child and exits 3; when the API refuses
   the token a read of it (no Role), it exits 5 at once: such a task could never end.
   With an interactive coordinator (the chart's notebook.coordinator) there is no
   chief Job: the notebook kernel is the chief and, while it lives, renews a heartbeat in
   the ConfigMap named like the chief Job (TF_CLUSTER_HEARTBEAT; a ConfigMap, not a
   Lease: Argo CD never syncs Leases). The task stops (exit 0) when the kernel marks it
   done, or when it has not renewed it for
   TF_CLUSTER_HEARTBEAT_TIMEOUT seconds (TF_CLUSTER_START_TIMEOUT from this task's
   start while no kernel has renewed it since): a dead kernel never leaves servers
   running forever.

5. When TF_CLUSTER_FENCE_SECONDS > 0 (the chart's nodeLoss.fence), a few tasks (fences: the first
   two of the leading role, the first of each other role, the ParameterServer coordinator) fence
   pods stranded on a lost node: they watch the release's pods (TF_CLUSTER_RELEASE_SELECTOR) and
   every TF_CLUSTER_FENCE_SECONDS mark Failed each one still not finished
   TF_CLUSTER_FENCE_AFTER seconds after its deletion deadline. A live kubelet ends a deleted pod
   by that deadline; one that did not is on a node that no longer answers, and its Job
   (podReplacementPolicy: Failed) replaces it only once it is Failed. This is what Kubernetes'
   PodGC does for a node tainted node.kubernetes.io/out-of-service, without waiting for an admin.
   Should the node come back, its kubelet finds the pod deleted and stops it.
6. When TF_CLUSTER_METRICS_PORT is set (the chart's metrics.enabled) it serves the task's progress
   in the Prometheus text format at GET /metrics on that port (any address): it pipes the child's
   stdout and stderr, copies every byte to its own as it comes (any chunk, unchanged: Keras redraws
   its bar with \r and \b), and reads the complete lines with the rules of
   tooling/tf_cluster/progress.py (Keras' epoch lines and bars, the TF_CLUSTER_* protocol, the
   TF_CLUSTER_METRICS lines of 3.); tests/progress-corpus holds both readers to the same readings.
   Every series is a gauge labelled release, role, index, run (TF_CLUSTER_RELEASE, TF_CLUSTER_ROLE,
   JOB_COMPLETION_INDEX or TF_TASK_INDEX, TF_CLUSTER_RUN): tf_cluster_task_state{state=...} (1 for
   the current of waiting_for_peers, training, stopped_by_leader, exited), tf_cluster_task_epoch,
   _epochs, _step, _loss, _metric{name=...}, _steps_per_second, _examples_per_second (each once
   known), _peer_wait_seconds, _last_progress_timestamp_seconds, _start_timestamp_seconds and
   _index_failures (TF_CLUSTER_INDEX_FAILURES: the pod's job-index-failure-count annotation).
   Without it the child writes to the launcher's own stdout and stderr, as it always did.
7. Under MultiWorkerMirrored, every chief and worker but the leader (the chief, else worker 0)
   looks the leader's name up every TF_CLUSTER_INCARNATION_SECONDS (10) while its command runs
   (incarnation.py): once it names a new address (the leader's pod was replaced, e.g. after its
   node was lost and fenced), the task's collectives wait on a leader that no longer exists, and
   the launcher stops the command and exits 6 so that its Job starts it again, to join the new
   leader from the last checkpoint.

Exit codes:
    0     the command succeeded, or the leading Job completed and the child was stopped
          (or had completed before this task started: a late replacement exits at once),
          or the interactive coordinator said done or went silent (its heartbeat)
    3     the leading Job failed, or no longer exists; this task was stopped (fails this Job at once)
    4     peers did not resolve within TF_CLUSTER_PEER_TIMEOUT (fails this Job at once)
    5     the launcher was misconfigured (no command, unreadable TF_CONFIG, a token that may not
          read the leading Job)
    6     the ParameterServer coordinator stopped because a peer was lost with its node (fenced),
          or a MultiWorkerMirrored task because its leader was replaced (7.): its Job starts it
          again without counting a failure and it resumes from its checkpoint. Where its Job
          reads 6 so, a command's own exit 6 is reported as 1 (a failure its Job counts)
    N     otherwise the command's own exit code; 128+signal if it was killed, or stopped by a
          signal before the run was over (even when it then exited 0)

Environment (set by the chart): TF_CONFIG, TF_CLUSTER_ROLE, TF_TASK_INDEX,
TF_CLUSTER_NAMESPACE, TF_CLUSTER_LEADER_JOB, TF_CLUSTER_STOP_WITH_LEADER,
TF_CLUSTER_WAIT_FOR_PEERS, TF_CLUSTER_PEER_TIMEOUT, TF_CLUSTER_POLL_SECONDS,
TF_CLUSTER_STOP_GRACE, TF_CLUSTER_FENCE_SECONDS, TF_CLUSTER_FENCE_AFTER,
TF_CLUSTER_RELEASE_SELECTOR, TF_CLUSTER_METRICS_PORT, TF_CLUSTER_RELEASE, TF_CLUSTER_RUN,
TF_CLUSTER_INDEX_FAILURES; with an interactive coordinator TF_CLUSTER_HEARTBEAT,
TF_CLUSTER_START_TIMEOUT, TF_CLUSTER_HEARTBEAT_TIMEOUT. When TF_NUM_INTRAOP_THREADS is set (the chart derives it
from the CPU limit) and TF_NUM_INTEROP_THREADS is not, the child gets
TF_NUM_INTEROP_THREADS=max(2, intra-op). For runs outside Kubernetes (tf-cluster run-local),
TF_CLUSTER_LEADER_STATUS_FILE replaces the API: a file holding the leading
Job's condition (Complete / Failed), empty while it runs.
"""

# The launcher's protocol: what it does towards the cluster and the task (README of this package,
# "Identity"). Its number, not these files' bytes, names the release's Jobs: bump it when a change
# alters behaviour (tests/launcher/test_protocol.py tells).
PROTOCOL = 1
