"""Facts about a node: one probe dialect, and each fact a command with its parser.

``toolkit.facts.probe`` owns the dialect: the shell prelude, the section markers, the script
built from the chosen facts and the one function that splits its output (exit statuses and
"command not installed" handled there). The other modules each own one source of facts, the
command that reads it and the pure parser of its output (pyinfra's ``facts/`` shape).

Standard library only, and no import from the rest of ``toolkit``: the node-side acceptance
runner can ship this package with itself.
"""
