"""Throwaway hosts (provision.sandbox, provision.vm) and the tunnels to the hosts' Jupyter (provision.tunnel)."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Annotated

import typer

from provision.cli.common import Activity, app, err, handle_errors, out
from provision.errors import UsageError

# --- throwaway hosts (provision.sandbox) -------------------------------------------------------------------------
sandbox_app = typer.Typer(help="Throwaway Debian containers to apply to: one host, or a fleet with an inventory.",
                          no_args_is_help=True)
app.add_typer(sandbox_app, name="sandbox")


@sandbox_app.command("up")
@handle_errors
def sandbox_up(
    names: Annotated[list[str], typer.Argument(help="Container names, one host each.", show_default=False)],
    os_name: Annotated[str, typer.Option("--os", help="debian-12 or debian-13.")] = "debian-13",
    output: Annotated[Path | None, typer.Option("--output", "-o", help="Write an inventory of these hosts here.")] = None,
    profile: Annotated[str | None, typer.Option("--profile", help="Set provision_profile for these hosts.")] = None,
    connection: Annotated[str, typer.Option("--connection", help="How the inventory reaches them: ssh (as a user's "
                                            "machine: the admin account with sudo) or docker (docker exec as root).")]
    = "ssh",
    vm: Annotated[bool, typer.Option("--vm", help="Virtual machines (QEMU, a kernel of their own: the driver's "
                                     "kernel side runs for real) instead of containers; slow, for tests.")] = False,
    firmware: Annotated[str, typer.Option("--firmware", help="With --vm: direct (QEMU loads the kernel; fastest), "
                                          "uefi (OVMF, shim, GRUB, as a machine boots) or secure-boot (the same "
                                          "with Secure Boot on and Microsoft's keys enrolled).")] = "direct",
) -> None:
    """Start stock Debian hosts in containers (sshd, an admin account with sudo and a key, Debian's default sources)
    and write an inventory for them."""
    from provision import sandbox
    from provision.render.ansible import write_yaml

    release = os_name.removeprefix("debian-")
    codenames = sandbox.debian_codenames()
    if release not in codenames:
        raise UsageError(f"--os {os_name}: sandboxes run " + ", ".join(f"debian-{r}" for r in codenames))
    if connection not in ("ssh", "docker"):
        raise UsageError(f"--connection {connection}: use ssh or docker")
    for name in names:
        if not name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise UsageError(f"sandbox name '{name}': use letters, digits, '-', '_' and '.' only")
    if vm:
        _vm_up(names, release, os_name, output, profile, connection, firmware)
        return
    if firmware != "direct":
        raise UsageError(f"--firmware {firmware} is for --vm hosts: a container has no firmware of its own")
    for name in names:
        if sandbox.is_running(name):
            # `up` always gives a stock host: say so before what was applied to the old one is gone.
            err.print(f"{name}: replacing the running sandbox of this name with a fresh stock host (what was applied "
                      "to it is gone; `provision apply --sandbox NAME` reuses a running one)", markup=False)
    with Activity(err, f"starting {len(names)} sandbox(es)") as activity:
        started = sandbox.start_fleet(names, release, log=activity.log, progress=activity.update)
    hostvars = {n: {"provision_os": os_name, **({"provision_profile": profile} if profile else {})} for n in names}
    if output:
        write_yaml(sandbox.inventory(names, hostvars=hostvars, connection=connection), output)
        out.print(f"wrote {output}: " + shlex.join(["provision", "apply", *([] if profile else ["PROFILE"]), "-i",
                                                      str(output)]), markup=False)
    for box in started:
        out.print(f"{box.name}: running ({os_name}), "
                  + shlex.join(["ssh", "-i", str(sandbox.ssh_key()), "-p", str(box.port), f"{sandbox.ADMIN}@127.0.0.1"]),
                  markup=False)


def _vm_up(names: list[str], release: str, os_name: str, output: Path | None, profile: str | None,
           connection: str, firmware: str) -> None:
    from provision import sandbox, vm
    from provision.render.ansible import write_yaml

    if connection != "ssh":
        raise UsageError("--vm hosts are reached over SSH only (no --connection docker)")
    started = []
    for name in names:
        with Activity(err, f"starting VM {name}") as activity:
            started.append(vm.start(name, release, firmware=firmware, log=activity.log, progress=activity.update))
    if output:
        hosts = {n: {**vm.host_connection(n), "provision_os": os_name, **({"provision_profile": profile} if profile else {})}
                 for n in names}
        write_yaml({"all": {"hosts": hosts}}, output)
        out.print(f"wrote {output}: " + shlex.join(["provision", "apply", *([] if profile else ["PROFILE"]), "-i",
                                                      str(output)]), markup=False)
    for box in started:
        out.print(f"{box.name}: running ({os_name}, QEMU, {firmware} firmware), "
                  + shlex.join(["ssh", "-i", str(sandbox.ssh_key()), "-p", str(box.port), f"{sandbox.ADMIN}@127.0.0.1"]),
                  markup=False)


@sandbox_app.command("down")
@handle_errors
def sandbox_down(names: Annotated[list[str], typer.Argument(help="Container names.", show_default=False)]) -> None:
    """Remove sandbox containers and VMs (the shared package caches and the VMs' base disk stay)."""
    from provision import vm
    from provision.sandbox import remove

    for name in names:
        vm.remove(name)
        remove(name)
        out.print(f"{name}: removed", markup=False)


# --- tunnels to the hosts' Jupyter (provision.tunnel) -------------------------------------------------------------
tunnel_app = typer.Typer(help="The SSH tunnels `provision apply` starts so that each host's JupyterLab opens in a "
                         "browser here.", no_args_is_help=True)
app.add_typer(tunnel_app, name="tunnel")


@tunnel_app.command("list")
@handle_errors
def tunnel_list() -> None:
    """The tunnels that run: host, local URL (without the token), ssh's pid."""
    from provision.tunnel import all_tunnels

    tunnels = all_tunnels()
    for t in tunnels:
        out.print(f"{t.host}: http://{t.local_address}/lab -> 127.0.0.1:{t.remote_port} on the host (ssh pid {t.pid}, "
                  f"since {t.started})", markup=False)
    if not tunnels:
        out.print("no tunnels running", markup=False)


@tunnel_app.command("stop")
@handle_errors
def tunnel_stop(
    hosts: Annotated[list[str] | None, typer.Argument(help="Hosts whose tunnel to stop (default: every tunnel).",
                                                      show_default=False)] = None,
) -> None:
    """Stop tunnels (the hosts and their Jupyter keep running)."""
    from provision import tunnel

    names = hosts or [t.host for t in tunnel.all_tunnels()]
    for host in names:
        out.print(f"{host}: " + ("tunnel stopped" if tunnel.stop(host) else "no tunnel running"), markup=False)
    if not names:
        out.print("no tunnels running", markup=False)


