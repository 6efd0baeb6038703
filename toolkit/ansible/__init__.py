"""The playbook engine: where gpunode's Ansible content lives, the ansible-runner wrapper,
its events and the values that cross from Ansible (the plugins are ``toolkit/plugins``)."""
