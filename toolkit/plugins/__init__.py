"""gpunode's Ansible plugins: content that Ansible loads, as it loads roles.

``action/`` (run on the control machine, reading nodes only through ``toolkit.facts.probe``),
``filter/`` and ``modules/`` (run on the node; standard library and Ansible only). Ansible finds
them by path (``ansible.cfg``; ``toolkit/ansible/content.py`` for every ``gpunode`` run), not by
import. They sit above the domains they call (``check``, ``disks``, ``converge``, ``nodestate``,
``stack``, ``inventory``) and above the engine (``toolkit/ansible``), which imports none of them.
"""
