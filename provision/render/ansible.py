"""Render a Plan for Ansible: the playbook (preflight, gate, the full and the fast play) over the shipped roles, the
role variables (vars/plan.yml, from provision.render.role_vars), plan.json, and what makes a rendered directory run
on its own.

The plays load vars/plan.yml, whose keys all carry their role's prefix, so no variable is shared between roles. What
provision derives from the Plan for a host (the ledger's items, the record, the fingerprint) is provision.hostfacts'.
"""

from __future__ import annotations

import io
import json
import os
import shlex
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import TaggedScalar

from provision.errors import UsageError, printable
from provision.models import Plan
from provision.render.role_vars import ansible_vars
from provision.request import ApplyRequest
from provision.resources import COLLECTION, collections_dir

PLAIN_APPLY = ApplyRequest()  # a plain `provision apply` (and `provision render`): nothing left out, the fast path allowed

# Order matters: the driver first (libcuda), then the environment, then what installs wheels into it
# (the cuda and cudnn roles refuse to run before python_env has made the venv, for pypi sources).
# host_record runs last and always (even under --tags): it records what is installed now.
# ledger runs first: it removes what the ledger says provision installed for an earlier plan and this one does not
# want, before anything is installed (docs/hosts.md, "The ledger").
ROLES = ("ledger", "nvidia_driver", "python_env", "cuda", "cudnn", "container_engine", "nvidia_container_toolkit",
         "jupyter", "gpu_verify", "host_record")
# Runs in plays of its own before every other play: each host is read once, and when one is refused (a foreign driver,
# a held port, ...) a gate play stops every host of the run before the first change on any (roles/preflight).
PREFLIGHT = "preflight"
# Roles other roles include for the steps they share (roles/apt_packages: cuda's and cudnn's apt steps): never a play's.
INCLUDED_ROLES = ("apt_packages",)
VARS_FILE = "vars/plan.yml"


def _role(name: str) -> dict[str, Any]:
    # By the collection's name (provision.gpu.cuda), so the playbook runs wherever the collection is installed.
    # Each role is tagged with its short name (`provision apply --tags cuda`); host_record also runs under any --tags.
    return {"role": f"{COLLECTION}.{name}", "tags": [name, "always"] if name == "host_record" else [name]}


def _include_role(name: str) -> dict[str, Any]:
    """The role as a task that includes it when the play reaches it (`_role`'s name and tags, the tags applied to
    its tasks too): a play of included roles costs nothing to load when no host takes it. The full path's play is
    written this way, so a fast re-apply does not parse the roles it skips (0.4 s of ansible-playbook's start)."""
    role = _role(name)
    return {"name": f"Run the role {name}",
            "ansible.builtin.include_role": {"name": role["role"], "apply": {"tags": role["tags"]}},
            "tags": role["tags"]}


# The groups the preflight puts each host in (roles/preflight): every role runs on provision_full; only the verifier
# and the record on provision_fast, the hosts whose fingerprint, plan and roles match their last converged apply.
FULL_GROUP, FAST_GROUP = "provision_full", "provision_fast"
FAST_ROLES = ("gpu_verify", "host_record")


def _hosts_and(hosts: str | list[str], group: str) -> list[str]:
    """A host pattern: `hosts` that are also in `group` (Ansible's `&` in a list of patterns)."""
    return [*([hosts] if isinstance(hosts, str) else hosts), f"&{group}"]


# What one role hands another through the playbook (no role reads another's variables): the apply lock the
# preflight's gate took (preflight_lock, registered there) goes to host_record, which releases it; the notes of what
# the apply found and finished on its way (a stale lock taken over, the ledger's finished dpkg work) go to
# host_record too, which hands them to the controller for the summary (notes.json beside the record).
HANDOVER = {"host_record_lock_token": "{{ preflight_lock.token | default('') }}"}
LOCK_NOTE = "([preflight_lock.note] if preflight_lock.note | default('') else [])"


# What a destroy does with the host's apply lock after the ledger role removed what it lists (the gate play took the
# lock before, and refused a host a live apply holds): the note of a stale lock taken over goes to the controller
# (notes.json, as host_record hands an apply's), and the lock is released. Where /var/lib/provision was provision's,
# the ledger removed it last, lock and all (plugins/modules/provision_ledger.py): the release then finds none.
DESTROY_LOCK_TASKS: list[dict[str, Any]] = [
    {"name": "Hand the note of a stale lock taken over to the controller",
     "when": "preflight_lock.note | default('') | length > 0",
     "delegate_to": "localhost", "become": False, "check_mode": False,
     "block": [
         {"name": "Create the host's folder of the reports",
          "ansible.builtin.file": {"path": "{{ playbook_dir }}/reports/{{ inventory_hostname }}", "state": "directory",
                                   "mode": "0755"},
          "changed_when": False},
         {"name": "Write the note beside where an apply's record goes",
          "ansible.builtin.copy": {"content": "{{ [preflight_lock.note] | to_nice_json }}\n",
                                   "dest": "{{ playbook_dir }}/reports/{{ inventory_hostname }}/notes.json",
                                   "mode": "0644"},
          "changed_when": False}]},
    {"name": "Release the apply lock on the host",
     "provision.gpu.provision_lock": {"state": "release",
                                      "path": "{{ preflight_lock_path | default('/var/lib/provision/apply.lock') }}",
                                      "holder": {"token": "{{ preflight_lock.token }}"}},
     "changed_when": False,
     "when": "preflight_lock.token | default('') | length > 0"},
]


def site_playbook(plan: Plan, hosts: str | list[str] = "all", vars_file: str = VARS_FILE, *,
                  destroy: bool = False) -> list[dict[str, Any]]:
    """The plays of one Plan, after its preflight play: every role on the hosts of the full path, the verifier and
    the record on those of the fast path. The preflight play gathered the facts the roles read (`min`, `virtual`);
    these plays keep them. destroy: one play with only the ledger role, which removes everything the ledger lists
    (no preflight: it gathers its own facts), under the host's apply lock the gate play took (DESTROY_LOCK_TASKS)."""
    title = f"{plan.profile} ({plan.target.os_id}, {plan.gpu.model})"
    if destroy:
        return [{
            "name": f"Destroy {title}",
            "hosts": hosts,
            "become": True,
            "gather_subset": ["min", "virtual"],
            "environment": "{{ provision_environment | default({}) }}",
            "vars_files": [vars_file],
            "roles": [_role("ledger")],
            "post_tasks": DESTROY_LOCK_TASKS,
        }]
    common = {
        "become": True,
        "gather_facts": False,
        # Extra environment for every task, set per host in the inventory (the sandbox points pip at its cache).
        "environment": "{{ provision_environment | default({}) }}",
        "vars_files": [vars_file],
    }
    return [
        {"name": f"Provision {title}", "hosts": _hosts_and(hosts, FULL_GROUP), **common,
         "vars": {**HANDOVER, "host_record_notes": f"{{{{ {LOCK_NOTE} + (ledger_finished | default([])) }}}}"},
         "tasks": [_include_role(name) for name in ROLES]},
        {"name": f"Verify {title} (fingerprint matches its last converged apply: no role has anything to do)",
         "hosts": _hosts_and(hosts, FAST_GROUP), **common,
         "vars": {"host_record_fast": True, "gpu_verify_assume_installed": True, **HANDOVER,
                  "host_record_notes": f"{{{{ {LOCK_NOTE} }}}}"},
         "roles": [_role(name) for name in FAST_ROLES]},
    ]


def preflight_play(plan: Plan, hosts: str | list[str] = "all", vars_file: str = VARS_FILE) -> dict[str, Any]:
    """Read each host of a group once and refuse it, before any play changes anything (tagged always: it runs
    under --tags too)."""
    return {
        "name": f"Preflight {plan.profile}: refuse what would make the plan fail, before the first change",
        "hosts": hosts,
        "become": True,
        # What the roles read too (distribution, architecture, kernel, service manager, Python, FQDN,
        # virtualization): the plays after this one keep these facts and gather none.
        "gather_subset": ["min", "virtual"],
        "vars_files": [vars_file],
        "roles": [{"role": f"{COLLECTION}.{PREFLIGHT}", "tags": [PREFLIGHT, "always"]}],
    }


def gate_play(hosts: str | list[str], lock: dict[str, Any] | None = None) -> dict[str, Any]:
    """After every group's preflight: when any host was refused, every other host of the run stops too. Then each
    host's apply lock is taken (plugins/modules/provision_lock.py); lock: {"holder": who takes it, "live_tokens":
    the runs still going on that controller}, as provision.pipeline.render.lock_holder says (a rendered playbook run by hand: the lock
    module makes a token of its own)."""
    return {
        "name": "Preflight gate: change every host or none",
        "hosts": hosts,
        "gather_facts": False,
        **({"vars": unsafe_strings({"preflight_lock_holder": lock.get("holder") or {},
                                    "preflight_lock_live_tokens": lock.get("live_tokens") or []})} if lock else {}),
        "tasks": [{"name": "Stop when the preflight refused a host of this run",
                   "ansible.builtin.import_role": {"name": f"{COLLECTION}.{PREFLIGHT}", "tasks_from": "gate"},
                   "tags": [PREFLIGHT, "always"]}],
    }


def write_yaml(data: Any, path: Path) -> None:
    """YAML as yamllint and ansible-lint want it (a play list at column 0, two-space indents), behind `---`."""
    yaml = YAML()
    yaml.default_flow_style = False
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)  # yamllint's (and ansible-lint's) indentation
    path.parent.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO()
    if isinstance(data, list):  # a play list: top-level items at column 0, nested sequences indented
        for item in data:
            inner = io.StringIO()
            yaml.dump(item, inner)
            buf.write("- " + "\n  ".join(inner.getvalue().rstrip("\n").split("\n")) + "\n")
    else:
        yaml.dump(data, buf)
    path.write_text("---\n" + buf.getvalue())


def render_ansible(plan: Plan, out_dir: str | Path, *, inventory: dict[str, Any] | str | Path | None = None,
                   skip_frameworks: bool = False) -> dict[str, Path]:
    """Write site.yml, vars/plan.yml, plan.json (and inventory.yml when given) into out_dir. Returns the paths."""
    return render_fleet([(plan, None)], out_dir, ApplyRequest(skip_frameworks=skip_frameworks), inventory=inventory)


def role_vars_of(plan: Plan, request: ApplyRequest, *, interpreters: dict[str, tuple[str, str]] | None,
                 fetch_dir: str) -> dict[str, Any]:
    """The role variables of one Plan for this request (vars/plan.yml's), as the playbook and the fast re-apply's
    round trip (provision.pipeline.probe) both read them."""
    fetched = (interpreters or {}).get(plan.python.managed.archive) if plan.python.managed else None
    uv = (interpreters or {}).get(plan.python.installer.wheel) if plan.python.installer else None
    return ansible_vars(plan, skip_frameworks=request.skip_frameworks, fetch_dir=fetch_dir,
                        full_reason=request.full_reason, partial=bool(request.tags), interpreter=fetched, installer=uv)


def render_fleet(groups: list[tuple[Plan, list[str] | None]], out_dir: str | Path,
                 request: ApplyRequest = PLAIN_APPLY, *, inventory: dict[str, Any] | str | Path | None = None,
                 interpreters: dict[str, tuple[str, str]] | None = None,
                 lock: dict[str, Any] | None = None) -> dict[str, Path]:
    """One play per (plan, hosts) group, in one playbook: Ansible runs every host in parallel, each with its own
    profile's variables. hosts None means every host in the inventory (a single plan). With one group the files are
    site.yml, vars/plan.yml and plan.json; with more, vars/plan-<n>.yml and plan-<n>.json per group.
    request: the run as asked (--skip-frameworks; destroy and --purge-home; why no host may take the fast path,
    request.full_reason; --tags: only part of the plan, ansible_vars' partial); interpreters: the managed
    interpreters' archives and the installer's wheel apply fetched and checked, {file name: (path on the controller,
    sha256)}; lock: who takes each host's apply lock (gate_play)."""
    destroy = request.destroy
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    files = {"playbook": out / "site.yml"}
    plays: list[dict[str, Any]] = []
    preflights: list[dict[str, Any]] = []
    sources = []
    for n, (plan, hosts) in enumerate(groups, start=1):
        suffix = "" if len(groups) == 1 else f"-{n}"
        vars_rel = f"vars/plan{suffix}.yml"
        files[f"vars{suffix}"] = out / vars_rel
        files[f"plan{suffix}"] = out / f"plan{suffix}.json"
        if not destroy:  # destroy removes only what the ledger lists: nothing found on the host can stop that
            preflights.append(preflight_play(plan, hosts if hosts is not None else "all", vars_rel))
        plays += site_playbook(plan, hosts if hosts is not None else "all", vars_rel, destroy=destroy)
        role_vars = role_vars_of(plan, request, interpreters=interpreters, fetch_dir=str(out / "reports"))
        if destroy:
            role_vars |= {"ledger_destroy": True, "ledger_purge_home": request.purge_home}
        write_yaml(unsafe_strings(role_vars), files[f"vars{suffix}"])
        _header(files[f"vars{suffix}"], plan.profile_path or plan.profile)
        files[f"plan{suffix}"].write_text(json.dumps(plan.model_dump(mode="json"), indent=2) + "\n")
        sources.append(plan.profile_path or plan.profile)
    every: str | list[str] = "all" if any(h is None for _, h in groups) else sorted({h for _, hs in groups for h in hs or []})
    # destroy has no preflight, but takes the host's apply lock as an apply does (the gate play): a live apply is
    # refused before anything is removed.
    write_yaml([*preflights, gate_play(every, lock), *plays] if preflights or destroy else plays, files["playbook"])
    _header(files["playbook"], ", ".join(sources))
    if inventory is not None:
        files["inventory"] = out / "inventory.yml"
        if isinstance(inventory, dict):
            write_yaml(inventory, files["inventory"])
        else:
            files["inventory"].write_text(Path(inventory).read_text())
    return files


JINJA_MARKS = ("{{", "{%", "{#")


def unsafe_strings(data: Any) -> Any:
    """`data` with every string that holds a Jinja delimiter tagged `!unsafe`, which Ansible never templates. The
    Plan's values cannot hold one (provision.plan_rules); the paths of the controller (the -o directory, where
    provision is installed) can, and a variable's value is otherwise templated when a task uses it."""
    if isinstance(data, dict):
        return {key: unsafe_strings(value) for key, value in data.items()}
    if isinstance(data, list):
        return [unsafe_strings(value) for value in data]
    if isinstance(data, str) and any(mark in data for mark in JINJA_MARKS):
        return TaggedScalar(data, style='"', tag="!unsafe")
    return data


def _header(path: Path, source: str) -> None:
    # A comment line: a line break in a file name would end it, and what followed would be YAML (a play, say).
    header = f"# Generated by provision from {printable(source)}; edit the profile, not this file.\n"
    path.write_text("---\n" + header + path.read_text().removeprefix("---\n"))


def check_ansible_path(path: str | Path, what: str) -> None:
    """Refuse a path Ansible would not open: it expands $NAME (and ${NAME}) in the paths it is given (an inventory,
    a playbook, a directory's ansible.cfg), so it would read another file, or none."""
    text = str(Path(path).resolve())
    if os.path.expandvars(text) != text:
        raise UsageError(f"{what} {path}: Ansible reads '$NAME' in a path as an environment variable and would open "
                         "another file; use a file and directory whose path has no '$'")


EXAMPLE_INVENTORY = {"all": {"hosts": {"gpu-box": {
    "ansible_host": "192.0.2.10",  # TEST-NET-1: never a real machine; put the host's address here
    "ansible_user": "admin",
}}}}


def write_standalone(out_dir: str | Path, files: dict[str, Path], *, profile: str, os_override: str | None,
                     skip_frameworks: bool, image_tag: str, image_context: bool,
                     base_image: str | None = None) -> dict[str, Path]:
    """What makes a rendered directory run on its own (`provision render -o DIR`): ansible.cfg naming the shipped
    collection provision.gpu (as `provision apply` passes it to ansible-runner) and the inventory, an example
    inventory when none was given, and README.md with the exact commands. Returns the paths it wrote."""
    out = Path(out_dir).resolve()
    written: dict[str, Path] = {}
    if "inventory" not in files:
        written["inventory"] = out / "inventory.yml"
        write_yaml(EXAMPLE_INVENTORY, written["inventory"])
        text = written["inventory"].read_text().removeprefix("---\n")
        written["inventory"].write_text("---\n# An example: replace gpu-box's address and account with your machine's "
                                        "(or render with -i INVENTORY).\n" + text)
    written["ansible.cfg"] = out / "ansible.cfg"
    written["ansible.cfg"].write_text(
        "# Generated by provision: the collection provision.gpu (roles and modules) of the provision installation\n"
        "# that rendered this directory, ahead of Ansible's usual places (without the collections_path line, the one\n"
        "# installed with ansible-galaxy runs instead).\n"
        "[defaults]\n"
        "inventory = inventory.yml\n"
        f"collections_path = {collections_dir()}:~/.ansible/collections:/usr/share/ansible/collections\n"
        "retry_files_enabled = false\n"
        "\n"
        "[ssh_connection]\n"
        "pipelining = true\n"
    )
    # The commands a person copies: each word shell-quoted (a profile path with a space, a quote or a `$` runs on
    # that file), the profile absolute so that they run from any directory, `cd` included.
    args = [str(Path(profile).resolve()), *(["--os", os_override] if os_override else []),
            *(["--skip-frameworks"] if skip_frameworks else []), *(["--base-image", base_image] if base_image else [])]
    docker_build = shlex.join(["docker", "build", "-t", image_tag, str(out)])
    # The wheel steps bind-mount the wheels from the context (RUN --mount), which only BuildKit builds.
    buildkit = ("It builds with BuildKit, Docker's default builder since Engine 23 (on 18.09-22, set "
                "DOCKER_BUILDKIT=1): the wheel steps mount the wheels from the context instead of copying them into "
                "a layer.\n")
    if image_context:
        docker = (f"    {docker_build}\n\n"
                  "The build context (wheels/, provision/, docker/) is in this directory; the wheels were downloaded "
                  "for the base image's Python and C library. " + buildkit)
    else:
        docker = (f"    {shlex.join(['provision', 'render', *args, '-o', str(out), '--image-context'])}\n"
                  f"    {docker_build}\n\n"
                  "The Dockerfile installs the plan's wheels from its build context (no step needs the network); "
                  "`--image-context` downloads them into this directory first, beside provision/ and docker/. "
                  f"`{shlex.join(['provision', 'build', *args])}` does both in one step. " + buildkit)
    written["readme"] = out / "README.md"
    written["readme"].write_text(
        f"# Rendered by provision from {printable(profile)}\n\n"
        "Edit the profile and render again rather than editing these files.\n\n"
        "## Provision hosts with Ansible\n\n"
        f"Put your hosts in inventory.yml, then, in this directory:\n\n"
        f"    {shlex.join(['cd', str(out)])}\n"
        "    ansible-playbook site.yml\n\n"
        "ansible.cfg names the collection provision.gpu (the roles and provision's Ansible modules) and the "
        "inventory. Add `--check` for a dry run, "
        "`-K` when sudo asks for a password. The play escalates with sudo (`become: true`).\n\n"
        "## Build the Docker image\n\n"
        f"{docker}"
    )
    return written
