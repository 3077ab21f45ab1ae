"""What the checks ask of a host (host_probe.py's questions) and where they look, from the plan as JSON: the one
place test_host.py and the fast re-apply's round trip (provision.pipeline.probe, which reads the host for the checks
in the same connection) both take them from. Standard library only: provision/checks imports nothing else of
provision."""

from __future__ import annotations

from pathlib import Path

# Where the jupyter role keeps its token and what it names its unit: data/paths.yaml's jupyter_state_dir and jupyter
# unit, the role's defaults (tests/unit/test_roles.py keeps them equal).
STATE_DIR = "/var/lib/provision/jupyter"
SERVICE = "provision-jupyter"
HTTP_STATUS = (Path(__file__).parent / "http_status.py").read_text()


def driver_packages(plan: dict) -> list[str]:
    d = plan["driver"]
    return list(d["userspace_packages"]) if d["install"] else []


def driver_version_wanted(plan: dict) -> bool:
    d = plan["driver"]
    return not d["install"] and d["source"] == "platform" and plan["target"]["kind"] != "jetson"


def jupyter_url(plan: dict) -> str:
    j = plan["jupyter"]
    scheme = "https" if j["tls"] else "http"
    addr = "127.0.0.1" if j["bind"] in ("0.0.0.0", "127.0.0.1") else j["bind"]
    addr = "[::1]" if addr == "::" else (f"[{addr}]" if ":" in addr else addr)
    return f"{scheme}://{addr}:{j['port']}/api/status"


def host_questions(plan: dict) -> dict:
    """host_probe.py's questions for this plan. With a token: a request with it and one without it; with a password:
    one without any credential."""
    jupyter = plan["jupyter"]["enabled"]
    http = [[jupyter_url(plan), f"{STATE_DIR}/token"]] if jupyter and plan["jupyter"]["auth"] == "token" else []
    return {
        "user": plan["user"], "venv": plan["python"]["venv"], "packages": driver_packages(plan),
        "smi": driver_version_wanted(plan), "interpreter": plan["python"]["interpreter"],
        "managed_prefix": (plan["python"].get("managed") or {}).get("prefix", ""),
        "service": SERVICE if jupyter else "",
        "http": http + [[jupyter_url(plan), ""]] if jupyter else [],
        "http_status": HTTP_STATUS,
    }
