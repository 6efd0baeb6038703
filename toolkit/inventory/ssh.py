"""SSH arguments as Ansible passes them and OpenSSH reads them, and the options gpunode refuses.

Three readers stand between an inventory's ``ansible_ssh_common_args`` and a connection, and
each is modelled here as its source has it:

1. Ansible's ssh connection plugin splits each variable with ``shlex`` and strips every word
   (ansible-core ``plugins/connection/ssh.py``, ``_split_ssh_args``).
2. ssh, scp and sftp read the words with getopt (openssh-portable ``ssh.c``, ``scp.c``,
   ``sftp.c``): a letter that takes an argument takes the rest of its word (``-oX``,
   ``-4oX``) or the next word (``-o X``).
3. ``-o``'s argument is one configuration line (``ssh.c`` calls ``process_config_line`` with
   it; ``readconf.c``): the keyword ends at whitespace, ``"`` or ``=``; one ``=`` or a run of
   whitespace may come first; a ``"`` in the keyword quotes up to the next ``"``; the keyword
   is matched without regard to case; the rest is split into words by ``argv_split``
   (``misc.c``: ``'`` and ``"`` quote, ``\\`` escapes a quote, a backslash or a space, ``#``
   starts a comment) and values such as ``no`` compare without regard to case.

What is refused (OpenSSH 9 ``ssh_config(5)``), each because it lets a connection go ahead with
a host that was not proven or runs something on this machine:

- ``StrictHostKeyChecking`` other than ``yes``/``true``/``ask`` (``no``, ``off``, ``false``
  accept any key; ``accept-new`` trusts a first key unseen);
- ``UserKnownHostsFile`` that names no file gpunode can check against: ``/dev/null`` in any
  spelling (``/dev//null``, ``/dev/../dev/null``, a link to it: the path is resolved), any
  other device, ``none``, or a path with ``%`` tokens or ``${}`` variables that ssh expands
  to a file this reader cannot know;
- ``KnownHostsCommand`` (its output is trusted as known hosts, and ``%K`` hands it the
  offered key: ``echo %H %t %K`` trusts every key);
- ``ProxyCommand``, ``LocalCommand``, ``PermitLocalCommand`` and ``PKCS11Provider``,
  ``SecurityKeyProvider`` (``-I``): a command run or a library loaded on this machine. A jump
  host is ``ProxyJump`` (``-J``), whose own connection checks its host key;
- ``-F`` (a configuration file, read unseen) and lines ssh itself refuses (``Include``,
  ``Match`` and ``Host`` on the command line, a quote left open): gpunode refuses them when
  the inventory is loaded rather than when a node is reached.

``GlobalKnownHostsFile`` stays allowed: pointing it anywhere (``/dev/null`` included) leaves
the user's file checked.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator

from toolkit.errors import clip

# The variables whose words reach ssh, scp or sftp (ansible-core's ssh connection plugin:
# ssh_args, ssh_common_args, ssh_extra_args, scp_extra_args, sftp_extra_args).
SSH_ARGS_VARS = (
    "ansible_ssh_args",
    "ansible_ssh_common_args",
    "ansible_ssh_extra_args",
    "ansible_scp_extra_args",
    "ansible_sftp_extra_args",
)
# OpenSSH's getopt strings (openssh-portable ssh.c, scp.c, sftp.c): the letters that take an
# argument, which is the rest of the word (`-oX=Y`, `-4o X=Y`) or the next word.
# ssh: "1246ab:c:e:fgi:kl:m:no:p:qstvx" "AB:CD:E:F:GI:J:KL:MNO:P:Q:R:S:TVw:W:XYy";
# scp: "12346ABCTdfOpqRrstvD:F:J:P:S:c:i:l:o:X:";
# sftp: "1246AafhNpqrvCc:D:i:l:o:s:S:b:B:F:J:P:R:X:".
SSH_ARG_LETTERS = ("bceilmopBDEFIJLOPQRSwW", "DFJPSciloX", "cDilosSbBFJPRX")
# StrictHostKeyChecking values that check (readconf.c, multistate_strict_host_key); `no`,
# `off`, `false` and `accept-new` (a first key trusted unseen) do not.
CHECKING = ("yes", "true", "ask")
# readconf.c's delimiters: WHITESPACE, and for the keyword also QUOTE and "=".
_WHITESPACE = " \t\r\n"
# Keywords whose value runs a command or loads a library on this machine; "none" turns each
# off (ssh_config(5)).
_RUNS_SOMETHING = {
    "proxycommand": ("ProxyCommand", "runs a command on this machine to reach the host; use "
                     "ProxyJump (-J), whose connection checks the jump host's key"),
    "localcommand": ("LocalCommand", "runs a command on this machine after connecting"),
    "knownhostscommand": ("KnownHostsCommand", "runs a command whose output is trusted as "
                          "known host keys (%K hands it the key the host offers)"),
    "pkcs11provider": ("PKCS11Provider", "loads a library into ssh on this machine"),
    "securitykeyprovider": ("SecurityKeyProvider", "loads a library into ssh on this machine"),
}  # fmt: skip
# ssh refuses these on the command line (readconf.c: "directive not supported as a
# command-line option").
_NOT_ON_COMMAND_LINE = ("include", "match", "host")


class SshLineError(ValueError):
    """ssh would refuse the line (it exits 255 before connecting)."""


class SshRefused(ValueError):
    """gpunode refuses the SSH arguments; the message says why."""


def ansible_words(args: str) -> list[str]:
    """The words Ansible passes to ssh for one variable: ``shlex.split``, each stripped, empty
    ones dropped (ansible-core ``_split_ssh_args``).

    Raises:
        ValueError: ``shlex`` cannot split it (a quote left open).
    """
    return [word.strip() for word in shlex.split(args) if word.strip()]


def option_readings(words: list[str]) -> Iterator[tuple[str, str]]:
    """Every (letter, argument) pair ssh, scp or sftp would read from the words, all three
    readings together (a word one tool reads as an argument may be an option to another)."""
    for letters in SSH_ARG_LETTERS:
        index = 0
        while index < len(words):
            word = words[index]
            index += 1
            if not word.startswith("-") or word == "-":
                continue  # not an option word (getopt on Linux reads past it)
            for at in range(1, len(word)):
                if word[at] in letters:
                    argument = word[at + 1 :]
                    if not argument and index < len(words):
                        argument, index = words[index], index + 1
                    yield word[at], argument
                    break


def _strdelim(text: str) -> tuple[str, str | None] | None:
    """One token and the rest, as readconf's ``strdelim`` takes it (misc.c,
    ``strdelim_internal`` with ``split_equals``); None for a ``"`` left open."""
    at = next((i for i, c in enumerate(text) if c in _WHITESPACE + '"='), None)
    if at is None:
        return text, None
    if text[at] == '"':
        text = text[:at] + text[at + 1 :]
        end = text.find('"', at)
        if end < 0:
            return None
        rest = text[end + 1 :]
        return text[:end], rest.lstrip(_WHITESPACE)
    token, rest = text[:at], text[at + 1 :].lstrip(_WHITESPACE)
    if text[at] != "=" and rest.startswith("="):
        rest = rest[1:].lstrip(_WHITESPACE)
    return token, rest


def argv_split(text: str) -> list[str]:
    """The words of a value as OpenSSH's ``argv_split`` makes them (misc.c, comments on).

    Raises:
        SshLineError: A quote left open.
    """
    words: list[str] = []
    i = 0
    while i < len(text):
        if text[i] in " \t":
            i += 1
            continue
        if text[i] == "#":
            break
        quote = ""
        word = []
        while i < len(text):
            c = text[i]
            if (
                c == "\\"
                and i + 1 < len(text)
                and (text[i + 1] in "'\"\\" or (not quote and text[i + 1] == " "))
            ):
                i += 1
                word.append(text[i])
            elif not quote and c in " \t":
                break
            elif not quote and c in "\"'":
                quote = c
            elif quote and c == quote:
                quote = ""
            else:
                word.append(c)
            i += 1
        if quote:
            raise SshLineError("a quote left open")
        words.append("".join(word))
    return words


def config_line(line: str) -> tuple[str, list[str]] | None:
    """The lower-case keyword and value words of one configuration line (a ``-o`` argument),
    as readconf.c's ``process_config_line`` reads it; None when ssh ignores the line.

    Raises:
        SshLineError: ssh refuses the line.
    """
    # Trailing whitespace and form feeds go, never the first character (readconf.c's loop).
    line = line[:1] + line[1:].rstrip(_WHITESPACE + "\f")
    taken = _strdelim(line)
    if taken is None:
        return None
    keyword, rest = taken
    if not keyword:  # one leading "=" or run of whitespace
        taken = _strdelim(rest) if rest is not None else None
        if taken is None:
            return None
        keyword, rest = taken
    if not keyword or keyword[0] in "\n#":
        return None
    keyword = keyword.lower()
    rest = (rest or "").lstrip(_WHITESPACE)
    if keyword in _NOT_ON_COMMAND_LINE:
        raise SshLineError(f"{keyword.capitalize()} is not read from the command line")
    if not rest:
        return keyword, []
    return keyword, argv_split(rest)


def _known_hosts_file(words: list[str]) -> str | None:
    """Why a UserKnownHostsFile value is refused, or None."""
    if not words:
        return "names no file"
    for word in words:
        if word.lower() == "none":
            return "is none: no file to check host keys against"
        if "%" in word or "${" in word:
            return "has % tokens or ${} variables: ssh expands them to a file unseen here"
        path = os.path.realpath(os.path.expanduser(word))
        if path == "/dev" or path.startswith("/dev/"):
            return f"is {path}, a device: host keys would be checked against nothing"
    return None


def check_ssh_args(args: str) -> str | None:
    """Check one SSH arguments variable; its ``UserKnownHostsFile`` (the first file named:
    OpenSSH keeps the first value it reads).

    Raises:
        SshRefused: An option turns host key checking off, runs a command or loads a library
            on this machine, names a config file, or ssh would refuse it.
    """
    try:
        words = ansible_words(args)
    except ValueError as err:
        raise SshRefused(f"cannot parse SSH arguments: {err}") from None
    known_hosts = None
    for letter, argument in option_readings(words):
        if letter == "F":
            raise SshRefused(
                f"-F {clip(argument)} names an ssh config file, which could turn host "
                "key checking off unseen; put the options in the variable itself"
            )
        if letter == "I":
            raise SshRefused(f"-I {clip(argument)} loads a library into ssh")
        if letter != "o":
            continue
        try:
            read = config_line(argument)
        except SshLineError as err:
            raise SshRefused(f"-o {clip(argument)!r}: ssh refuses it: {err}") from None
        if read is None:
            continue
        keyword, values = read
        value = " ".join(values)
        if keyword == "stricthostkeychecking" and (
            len(values) != 1 or values[0].lower() not in CHECKING
        ):
            raise SshRefused(
                f"StrictHostKeyChecking={clip(value)} turns host key checking off"
                + (
                    " for new hosts (a first key is trusted unseen)"
                    if value.lower() == "accept-new"
                    else ""
                )
                + " (only yes or ask check); add the host's key to a known_hosts file "
                "(ssh-keyscan -H <host> >> known_hosts, then compare its fingerprint with the "
                "host's own `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`) and use "
                "StrictHostKeyChecking=yes with UserKnownHostsFile=<that file>"
            )
        if keyword == "userknownhostsfile":
            why = _known_hosts_file(values)
            if why:
                raise SshRefused(
                    f"UserKnownHostsFile={clip(value)} {why}; name a known_hosts file "
                    "(host key checking must stay on)"
                )
            known_hosts = known_hosts or values[0]
        if keyword == "permitlocalcommand" and value.lower() not in ("no", "false"):
            raise SshRefused(
                f"PermitLocalCommand={clip(value)} lets ssh run commands on this machine; remove it"
            )
        off = ("none", "internal") if keyword == "securitykeyprovider" else ("none",)
        if keyword in _RUNS_SOMETHING and value.lower() not in off:
            name, why = _RUNS_SOMETHING[keyword]
            raise SshRefused(f"{name}={clip(value)} {why}; gpunode refuses it")
    return known_hosts
