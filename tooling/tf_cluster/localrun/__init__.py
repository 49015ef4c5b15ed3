"""Local execution: a rendered release's pods as processes on this machine (`tf-cluster run-local`,
local trials of `tf-cluster tune`), with the Job semantics of the cluster.

- `jobs.py`: the Kubernetes Job controller's rules for the chart's Indexed Jobs, as a pure state
  machine (events in, decisions out; the clock passed in).
- `processes.py`: a pod as a process: its argv, env and mounts as the pod has them, started,
  signalled and watched; `sandbox.py` (run as a script) gives it the pod's Linux namespaces.
- `local_cluster.py`: `LocalCluster` turns the state machine's decisions into processes.
- `leftovers.py`: what the tasks left behind: progress files, pod-private files, hints.
- `local_runner.py`: `LocalRunner`, the runner seam (tf_cluster.runner) over a `LocalCluster`.
"""
