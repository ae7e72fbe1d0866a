"""The policy model: what an operator may configure, its defaults and its bounds.

Only the shape and the rules that relate one value to another live here. Reading
files and turning validation errors into messages is `policies.load`; applying a
policy to a run is the job of the rooms that import this one.

Every section is frozen and rejects unknown keys (`section.Section`), so a typo in a
policy file is an error rather than a setting that silently does nothing. New sections
are added as further fields of `policy.Policy`, each with a default so that older files
keep loading. One module per idea:

- `policy`: the whole file, `Policy`, one field per section;
- `sandbox`: where boxes come from ([sandbox], [image], [pool]);
- `limits`: what one run or one tenant may use ([limits], [output], [files], [tenants]);
- `lifetimes`: how long things last ([sessions], [tasks], [console]);
- `browser`: the browser box of `browse` ([browser]);
- `traffic`: hosts, ports, methods, paths, address ranges and TLS mode, the parts an egress
  rule and a capability are both made of;
- `egress`: what every run may reach ([egress]);
- `capability`: what an agent may ask for ([capabilities.NAME]) and the caps on grants
  ([broker]);
- `hatch`: host directories copied in and what their patches may carry ([hatch]);
- `section`: the base of every section and how a check words its problem.

Capabilities and egress rules are validated down to their parts: host patterns are
canonicalized by `policies.hosts`, path patterns and durations are read by
`policies.capabilities`. Every rejection says what to write instead.

The package imports none of its modules: import each name from the module that owns it.
"""
