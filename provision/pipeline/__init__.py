"""The apply path as stages, one module each, called in this order by provision/apply.py (docs/design.md draws it):

    plan       profile file → Profile → Plan (pure; also `provision plan`, `render`, `build`)
    targets    inventory or sandbox → hosts grouped by Plan (--limit, --failed; check's recorded plans)
    preflight  every refusal and warning the controller can make before the prompt; each host's SSH key policy
    render     the run's folder written: playbook, role variables, host-key host_vars (and its inputs fetched)
    run        ansible-runner on every host at once; raw events and the recap
    events     the only reader of the roles' output: task lines, then a HostResult per host
    probe      the fast re-apply in one round trip per host, before render and run: a host it finds converged is
               verified and done there (its HostResult as events would give it); the playbook runs on the others
    record     the controller's state: per-host record and ledger, the run's results for --failed
    check      testinfra against the hosts (after the playbook, or beside it on the fast path)
    connect    SSH tunnels to each host's Jupyter and its token (the last step, when the CLI asks)
    report     pure functions from the outcome to the lines a person reads

A stage imports only the stages above it (tests/unit/test_layers.py).
"""
