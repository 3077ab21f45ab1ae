"""Stage `connect`, the last, which the CLI asks for after an apply: how to reach each host's JupyterLab from this
machine. A tunnel per host from a free local port (provision.tunnel, which outlives the command) and the Jupyter
token read over SSH by the account that owns it, in memory only; or, where no tunnel can be made, where the server
answers and how to read the token. SSH is the host's own, as provision.ssh computed it for the run.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from provision import tunnel as tunnels
from provision.errors import ProvisionError
from provision.models import Plan
from provision.pipeline.targets import Host, Targets


@dataclass
class JupyterAccess:
    """How to reach one host's JupyterLab from this machine. url carries the token (print it once, to the user)."""

    host: str
    url: str | None = None  # http://127.0.0.1:<local port>/lab?token=...: opens JupyterLab in a browser here
    where: str = ""  # the URL without the token, or where the server answers when no tunnel could be made
    token_hint: str = ""  # how to read the token when it is not in url
    tunnel: Any = None  # provision.tunnel.Tunnel
    problem: str = ""  # why no tunnel was made


def _ssh(host: Host) -> list[str] | None:
    k = host.keys
    return list(k.ssh) if k is not None and k.ssh else None


def token_readable(plan: Plan) -> bool:
    """Whether the apply reads this plan's Jupyter token for the URL it prints (a token login, bound to loopback)."""
    j = plan.jupyter
    return j.enabled and j.auth == "token" and j.bind.startswith("127.")


def read_tokens(found: Targets, *, skip: set[str] | None = None) -> dict[str, str]:
    """host -> Jupyter token, read over SSH by the account (as jupyter_access would), kept in memory only; skip: hosts
    whose token came another way (the fast re-apply's round trip)."""
    tokens: dict[str, str] = {}
    for host in found.records:
        if not token_readable(host.plan) or host.name in (skip or set()):
            continue
        ssh = _ssh(host)
        token = tunnels.read_token(ssh, host.plan.user) if ssh else None
        if token:
            tokens[host.name] = token
    return tokens


def jupyter_access(plan: Plan, hosts: list[Host], *, tunnels_too: bool = True,
                   tokens: dict[str, str] | None = None) -> list[JupyterAccess]:
    """For each host: a tunnel from a free local port (a distinct one per host) to its Jupyter, and the URL that
    opens JupyterLab here with the token read over SSH (provision.tunnel). A host Ansible does not reach over SSH,
    or whose Jupyter does not bind the loopback, gets where its server answers and how to read the token.
    tunnels_too=False: the same without starting anything (a dry run's or a failed run's hint)."""
    found: list[JupyterAccess] = []
    if not plan.jupyter.enabled:
        return found
    j = plan.jupyter
    scheme = "https" if j.tls else "http"
    token_file = tunnels.TOKEN_FILE
    taken: set[int] = set()
    for record in sorted(hosts, key=lambda h: h.name):
        host, ssh = record.name, _ssh(record)
        access = JupyterAccess(host)
        if not j.bind.startswith("127."):
            access.where = f"{scheme}://{host}:{j.port}/lab"
            access.token_hint = f"{j.auth} in /var/lib/provision/jupyter/, readable by {plan.user} only"
        elif ssh is None:
            access.where = f"{scheme}://127.0.0.1:{j.port}/lab on the host itself"
            access.token_hint = f"token in {token_file} (readable by {plan.user} and root)"
        else:
            access.token_hint = shlex.join([*ssh, "sudo", "-u", plan.user, "cat", token_file])
            manual = shlex.join([ssh[0], "-N", "-L", f"{j.port}:127.0.0.1:{j.port}", *ssh[1:]])
            access.where = f"{scheme}://127.0.0.1:{j.port}/lab after `{manual}`"
            if tunnels_too:
                try:
                    t = tunnels.open_tunnel(host, ssh, j.port, taken=taken)
                except ProvisionError as exc:
                    access.problem = exc.lines()[0]
                else:
                    taken.add(t.local_port)
                    access.tunnel = t
                    access.where = f"{scheme}://127.0.0.1:{t.local_port}/lab"
                    token = ((tokens or {}).get(host) or tunnels.read_token(ssh, plan.user)) \
                        if j.auth == "token" else None
                    if token:
                        access.url = f"{access.where}?token={token}"
        found.append(access)
    return found


def connect(found: Targets, ok: list[str], *, tokens: dict[str, str] | None = None) -> dict[str, JupyterAccess]:
    """host -> how to reach its JupyterLab, for the hosts in `ok` (those the apply left ready), tunnels started."""
    ready = [h for h in found.records if h.name in ok]
    return {a.host: a for group in found.groups
            for a in jupyter_access(group.plan, [h for h in ready if h.group is group], tokens=tokens)}


def host_summaries(plan: Plan, hosts: list[Host]) -> list[str]:
    """One line per host on how to reach its Jupyter, without starting anything (a dry run's or a failed run's
    hint): the exact tunnel command and how to read the token; never the token itself."""
    return [f"{a.host}: jupyter: {a.where}, token: {a.token_hint}"
            for a in jupyter_access(plan, hosts, tunnels_too=False)]
