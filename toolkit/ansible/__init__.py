"""Running gpunode's Ansible content: where it lives, the ansible-runner wrapper, plugins."""
