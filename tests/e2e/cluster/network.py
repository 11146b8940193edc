"""The pod network of the e2e node: one Linux bridge the test creates, and nothing else.

Addresses (all on the bridge, all created by the test, removed at the end):
- 10.244.0.0/24 is the pod subnet; the bridge holds its gateway 10.244.0.1, where CoreDNS
  listens for the pods;
- 10.244.255.0/24 is the Service range; its first address, 10.244.255.1, is the ClusterIP
  the API server gives the `kubernetes` Service, and the test puts that address on the
  bridge too and binds the API server there on port 443. Pods then reach the API server
  at KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT, as in any cluster, without
  kube-proxy: no iptables rules are written on the host.

No masquerading and no route out: pod traffic stays between the host and the pods' network
namespaces. Other Services' ClusterIPs are not routed (there is no kube-proxy); the suite
uses headless Services (DNS by CoreDNS) and pod IPs only.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

BRIDGE = "assay-e2e0"
POD_SUBNET = "10.244.0.0/24"
GATEWAY = "10.244.0.1"
SERVICE_SUBNET = "10.244.255.0/24"
API_ADDRESS = "10.244.255.1"
CNI_BIN_DIR = Path("/usr/lib/cni")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def bridge_exists() -> bool:
    return _ip("link", "show", BRIDGE, check=False).returncode == 0


def create_bridge() -> None:
    """The bridge with the gateway and the API server's Service address, up."""
    remove_bridge()
    _ip("link", "add", BRIDGE, "type", "bridge")
    _ip("addr", "add", f"{GATEWAY}/24", "dev", BRIDGE)
    _ip("addr", "add", f"{API_ADDRESS}/32", "dev", BRIDGE)
    _ip("link", "set", BRIDGE, "up")


def remove_bridge() -> None:
    if bridge_exists():
        _ip("link", "delete", BRIDGE)


def write_cni_config(conf_dir: Path, ipam_dir: Path) -> Path:
    """One conflist: the bridge plugin (gateway, host-local IPAM, no masquerade) and loopback."""
    conf_dir.mkdir(parents=True, exist_ok=True)
    conflist = {
        "cniVersion": "1.0.0",
        "name": "assay-e2e",
        "plugins": [
            {
                "type": "bridge",
                "bridge": BRIDGE,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET, "gateway": GATEWAY}]],
                    # A route to the Service range only (the API server), none to the world.
                    "routes": [{"dst": SERVICE_SUBNET}],
                    "dataDir": str(ipam_dir),
                },
            },
            {"type": "loopback"},
        ],
    }
    path = conf_dir / "10-assay-e2e.conflist"
    path.write_text(json.dumps(conflist, indent=1))
    return path
