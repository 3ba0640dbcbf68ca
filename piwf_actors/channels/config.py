"""Decision-channel configuration: which chats receive decisions, and who may answer.

Two files live in the config directory (`$PIWF_CONFIG_DIR`, else
`$XDG_CONFIG_HOME/piwf`, else `~/.config/piwf`):

``channels.toml`` holds the settings, one table per profile::

    [telegram.ops]                  # profile "ops"
    credential = "ops_bot"          # a key of credentials.toml
    allowed_user_ids = [1001]       # who may answer
    allowed_chat_ids = [2002]       # where decisions are sent and answers are taken from
    audiences = ["operator"]        # decisions whose audience is listed go here ("*": all)

``credentials.toml`` holds the secrets, one bot token per key::

    ops_bot = "123456:ABC-the-bot-token"

`credential` and `audiences` mean the same for every channel type; how a
type names people and chats in `allowed_user_ids` and `allowed_chat_ids`
(Telegram: integers), what its tokens look like, and any keys of its own are
its adapter's `PROFILE_SECTION` (`channels/base.py`), which reading a
`[<type>.<profile>]` table asks (so it imports that type's adapter, and no
other). Every id becomes text (Telegram's integers their decimal text).

Why the split and the rules: a bot token lets anyone who holds it impersonate
the bot, read the decisions it is sent and answer them in its name. So the
token lives apart from the settings, and `credentials.toml` is read only if it
is a regular file (not a symlink, which could point anywhere), owned by the
host's uid and not accessible to group or others (mode 600), the same demands
ssh makes of a private key. `channels.toml` decides who may answer decisions,
so it must belong to the host's uid (or root) and must not be writable by
group or others. The same goes for the config directory itself, as ssh's
StrictModes demands of ``~/.ssh``: whoever can write the directory can rename
either file away and put their own in its place, whatever the file's own mode
(the sticky bit does not make a group- or other-writable directory
acceptable). The directory is checked through one open descriptor and both
files are opened relative to it, so the directory checked is the directory
read from, even if the path is renamed meanwhile; a symlink to the directory
is followed and its target is what is checked. The directory is judged only
when it holds `channels.toml`, so an unrelated lax `~/.config/piwf` without
channels stays quiet.

Refusals never stop the host: channels are optional. A missing config
directory or a missing `channels.toml` means no channels. An unsafe config
directory (not a directory, unsafe ownership or mode) or a broken
`channels.toml` (unreadable, invalid TOML, an unknown channel type, unsafe
ownership or mode) is `file_error` and no profile starts. A broken profile
or credential is that profile's entry in `errors`; the other profiles still
start. Every reason is a single line naming the file and the key, and never
contains a token: the TOML parser's message for `credentials.toml` is cut
down to its line and column (it can quote the text it choked on), values are
never echoed, and anything token-shaped in text taken from `channels.toml` is
masked.

`load_channels` is a pure function of the files: call it again to reload, and
compare `fingerprint(profile)` of old and new to tell which profiles changed.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from piwf_actors.channels.base import ProfileSection
from piwf_actors.channels.private_files import Refused, check_directory, read_private
from piwf_actors.channels.registry import known_channel_types, profile_section

CHANNELS_FILE = "channels.toml"
CREDENTIALS_FILE = "credentials.toml"

#: The keys every channel type's profile has (a type may add its own: `ProfileSection.keys`).
PROFILE_KEYS = ("credential", "allowed_user_ids", "allowed_chat_ids", "audiences")
_PROFILE_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
# The characters of a TOML bare key: a credential name can be written unquoted
# in credentials.toml, and a token (which contains ':') can never pass for one.
_CREDENTIAL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_TOKEN_LIKE = re.compile(r"[0-9]+:[^\s'\"\]\[(),]+")
_TOML_POSITION = re.compile(r"\(at (line \d+, column \d+|end of document)\)\s*$")


class Secret:
    """A bot token that does not print itself.

    `repr`, `str` and f-strings show ``Secret('****')``; `reveal()` returns
    the value for the one call that needs it (the HTTP request). Pickling is
    refused so a token cannot ride along into a queue, a database or a child
    process by accident. Equality compares values in constant time.
    """

    __slots__ = ("_value",)
    _value: str

    def __init__(self, value: str) -> None:
        if not isinstance(value, str):
            raise TypeError("Secret holds a str")
        object.__setattr__(self, "_value", value)

    def reveal(self) -> str:
        return self._value

    def __repr__(self) -> str:
        return "Secret('****')"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash((Secret, self._value))

    def __setattr__(self, name: str, value: object) -> NoReturn:
        raise AttributeError("Secret is immutable")

    def __delattr__(self, name: str) -> NoReturn:
        raise AttributeError("Secret is immutable")

    def __reduce__(self) -> NoReturn:
        raise TypeError("a Secret cannot be pickled")

    def __copy__(self) -> Secret:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Secret:
        return self


@dataclass(frozen=True, slots=True)
class ChannelProfile:
    """One `[<type>.<profile>]` table, validated. Ids are text, as the channel names them."""

    profile: str
    credential: str
    allowed_user_ids: frozenset[str]
    allowed_chat_ids: tuple[str, ...]  # decisions are sent to each chat, in this order
    audiences: frozenset[str]  # "*" routes every audience
    channel_type: str = "telegram"
    # The type's own keys (`ProfileSection.keys`), as channels.toml gives them.
    settings: Mapping[str, Any] = field(default_factory=dict, hash=False)

    def routes(self, audience: str | None) -> bool:
        """Whether a decision for `audience` is delivered through this profile."""
        if "*" in self.audiences:
            return True
        return audience is not None and audience in self.audiences

    def allows(self, user_id: str, chat_id: str) -> bool:
        """Whether an answer from `user_id` in `chat_id` may decide."""
        return user_id in self.allowed_user_ids and chat_id in self.allowed_chat_ids


#: The first channel type's name for its profiles.
TelegramProfile = ChannelProfile


@dataclass(frozen=True, slots=True)
class ChannelsConfig:
    """The outcome of one `load_channels`: what parsed, what may start, and why not."""

    directory: Path
    configured: bool  # channels.toml exists
    profiles: dict[str, ChannelProfile]  # every profile that parsed, also those that cannot start
    tokens: dict[str, Secret]  # profile -> token, only for profiles that can start
    errors: dict[str, str]  # profile -> one-line reason it cannot start
    file_error: str | None  # channels.toml itself refused; then profiles is empty

    def startable(self) -> list[str]:
        """Profiles with a token and no error, sorted."""
        return sorted(name for name in self.profiles if name in self.tokens and name not in self.errors)

    def fingerprint(self, profile: str) -> str:
        """sha256 hex over the profile's settings and its token (if it has one).

        Equal fingerprints across two loads mean the profile's adapter can keep
        running. The token goes in only as hash input: it is high-entropy, so the
        digest does not give it away. Raises KeyError for a profile that did not
        parse.
        """
        if profile not in self.profiles:
            raise KeyError(f"no parsed channel profile {profile!r}")
        settings = self.profiles[profile]
        token = self.tokens.get(profile)
        canonical = json.dumps(
            {
                "type": settings.channel_type,
                "profile": settings.profile,
                "credential": settings.credential,
                "allowed_user_ids": sorted(settings.allowed_user_ids),
                "allowed_chat_ids": list(settings.allowed_chat_ids),
                "audiences": sorted(settings.audiences),
                "settings": dict(settings.settings),
                "token": None if token is None else token.reveal(),
            },
            sort_keys=True,
            separators=(",", ":"),
        )
        return hashlib.sha256(b"piwf-channel-profile-v1\0" + canonical.encode()).hexdigest()


def default_config_dir(env: Mapping[str, str] = os.environ) -> Path:
    """`$PIWF_CONFIG_DIR`, else `$XDG_CONFIG_HOME/piwf`, else `~/.config/piwf`; empty values count as unset."""
    if env.get("PIWF_CONFIG_DIR"):
        return Path(env["PIWF_CONFIG_DIR"]).expanduser()
    if env.get("XDG_CONFIG_HOME"):
        return Path(env["XDG_CONFIG_HOME"]).expanduser() / "piwf"
    if env.get("HOME"):
        return Path(env["HOME"]).expanduser() / ".config" / "piwf"
    return Path.home() / ".config" / "piwf"


def load_channels(directory: Path | None = None, *, uid: int | None = None) -> ChannelsConfig:
    """Read and check both files in `directory`; never raises for their content.

    `uid` is the uid that must own the files and the directory (default: this
    process's). The directory is opened once and both files are opened
    relative to it; it is judged (owner `uid` or root, mode & 0o022 == 0)
    only if it holds `channels.toml`.
    """
    directory = default_config_dir() if directory is None else Path(directory)
    uid = os.getuid() if uid is None else uid
    try:
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return ChannelsConfig(directory, False, {}, {}, {}, None)
    except NotADirectoryError:
        return ChannelsConfig(directory, True, {}, {}, {}, f"config directory {directory} is not a directory")
    except OSError as exc:
        reason = f"config directory {directory} cannot be opened: {exc.strerror or exc.__class__.__name__}"
        return ChannelsConfig(directory, True, {}, {}, {}, reason)
    try:
        return _load(directory, dir_fd, uid)
    finally:
        os.close(dir_fd)


def _load(directory: Path, dir_fd: int, uid: int) -> ChannelsConfig:
    """`load_channels` once the directory is open as `dir_fd`; every file is opened relative to it."""
    directory_problem = check_directory(directory, dir_fd, uid)
    try:
        raw = read_private(dir_fd, CHANNELS_FILE, uid=uid, follow_symlinks=True, secret=False)
    except FileNotFoundError:
        return ChannelsConfig(directory, False, {}, {}, {}, None)  # even in a lax directory: nothing configured
    except Refused as refused:
        return ChannelsConfig(directory, True, {}, {}, {}, directory_problem or str(refused))
    if directory_problem is not None:
        return ChannelsConfig(directory, True, {}, {}, {}, directory_problem)
    try:
        document = tomllib.loads(raw)
    except tomllib.TOMLDecodeError as exc:
        return ChannelsConfig(directory, True, {}, {}, {}, _mask(f"{CHANNELS_FILE}: invalid TOML: {exc}"))

    file_error = _check_channel_types(document)
    if file_error is not None:
        return ChannelsConfig(directory, True, {}, {}, {}, file_error)

    profiles: dict[str, ChannelProfile] = {}
    errors: dict[str, str] = {}
    for channel_type in sorted(document):
        for name, table in document[channel_type].items():
            if name in profiles or _mask(name) in errors:
                errors[_mask(name)] = _mask(f"{CHANNELS_FILE}: profile {name!r} is defined twice "
                                            "(profile names are shared by every channel type)")
                profiles.pop(name, None)
                continue
            parsed = _parse_profile(channel_type, name, table, profile_section(channel_type))
            if isinstance(parsed, ChannelProfile):
                profiles[name] = parsed
            else:
                errors[_mask(name)] = parsed

    tokens: dict[str, Secret] = {}
    if profiles:
        _resolve_tokens(directory, dir_fd, uid, profiles, tokens, errors)
    return ChannelsConfig(directory, True, profiles, tokens, errors, None)


# --- channels.toml ------------------------------------------------------------


def _check_channel_types(document: dict[str, Any]) -> str | None:
    """An unknown top-level table fails the whole file: a typo such as `[telegarm.ops]`
    would otherwise leave the operators without their channel and without a word."""
    known_types = known_channel_types()
    unknown = sorted(key for key in document if key not in known_types)
    if unknown:
        names = ", ".join(repr(key) for key in unknown)
        known = ", ".join(known_types)
        return _mask(f"{CHANNELS_FILE}: unknown channel type {names} (known: {known})")
    for channel_type, profiles in document.items():
        if not isinstance(profiles, dict):
            return f"{CHANNELS_FILE}: {channel_type!r} must be a table of profiles, like [{channel_type}.ops]"
    return None


def _parse_profile(channel_type: str, name: str, table: object, section: ProfileSection) -> ChannelProfile | str:
    """A validated profile, or the one-line reason it is refused."""
    if not _PROFILE_NAME.fullmatch(name):
        return _mask(
            f"{CHANNELS_FILE}: profile name {name!r} in [{channel_type}] must match [a-z0-9][a-z0-9_-]* "
            "and be at most 64 characters"
        )
    where = f"{CHANNELS_FILE}: [{channel_type}.{name}]"
    if not isinstance(table, dict):
        return f"{where} must be a table"

    problems: list[str] = []
    unknown = sorted(key for key in table if key not in PROFILE_KEYS and key not in section.keys)
    if unknown:
        problems.append(_mask(f"unknown key{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}"))
    missing = [key for key in PROFILE_KEYS if key not in table]
    if missing:
        problems.append(f"missing key{'s' if len(missing) > 1 else ''} {', '.join(map(repr, missing))}")

    credential = table.get("credential")
    if "credential" in table:
        if not isinstance(credential, str) or not credential:
            problems.append("credential must be a non-empty string")
        elif _TOKEN_LIKE.search(credential):
            problems.append(f"credential looks like a bot token; put it in {CREDENTIALS_FILE} and name its key here")
        elif not _CREDENTIAL_NAME.fullmatch(credential):
            problems.append("credential must be a key of letters, digits, '_' or '-', at most 64 characters")

    user_ids = _ids(table.get("allowed_user_ids"), section.user_id)
    if "allowed_user_ids" in table and user_ids is None:
        problems.append(f"allowed_user_ids must be a non-empty list of {section.user_ids}")

    chat_ids = _ids(table.get("allowed_chat_ids"), section.chat_id)
    if "allowed_chat_ids" in table:
        if chat_ids is None:
            problems.append(f"allowed_chat_ids must be a non-empty list of {section.chat_ids}")
        elif len(set(chat_ids)) != len(chat_ids):
            problems.append("allowed_chat_ids lists a chat twice (each decision would be sent twice)")

    for key, check in sorted(section.keys.items()):
        if key in table and (problem := check(table[key])) is not None:
            problems.append(_mask(f"{key} {problem}"))

    audiences = table.get("audiences")
    if "audiences" in table and not (
        isinstance(audiences, list) and audiences and all(isinstance(a, str) and a.strip() for a in audiences)
    ):
        problems.append('audiences must be a non-empty list of non-empty strings ("*" for every audience)')

    if problems:
        return f"{where} {'; '.join(problems)}"
    # No problem found: every key is there and valid.
    assert user_ids is not None and chat_ids is not None
    return ChannelProfile(
        profile=name,
        credential=table["credential"],
        allowed_user_ids=frozenset(user_ids),
        allowed_chat_ids=chat_ids,
        audiences=frozenset(table["audiences"]),
        channel_type=channel_type,
        settings={key: table[key] for key in sorted(section.keys) if key in table},
    )


def _ids(value: object, read_id: Callable[[object], str | None]) -> tuple[str, ...] | None:
    """A non-empty list of the type's ids as their text (`ProfileSection.user_id` / `chat_id`), or
    None when it is not a list, is empty, or holds anything that is not such an id."""
    if not isinstance(value, list) or not value:
        return None
    ids = [read_id(item) for item in value]
    found = [id_ for id_ in ids if id_ is not None]
    return tuple(found) if len(found) == len(ids) else None


# --- credentials.toml -----------------------------------------------------------


def _resolve_tokens(
    directory: Path,
    dir_fd: int,
    uid: int,
    profiles: dict[str, ChannelProfile],
    tokens: dict[str, Secret],
    errors: dict[str, str],
) -> None:
    """Fill `tokens` for the profiles whose credential checks out, `errors` for the rest.

    A refusal of the file itself becomes the error of every profile that needs it.
    """
    try:
        raw = read_private(dir_fd, CREDENTIALS_FILE, uid=uid, follow_symlinks=False, secret=True)
        credentials = _parse_credentials(raw)
    except FileNotFoundError:
        reason = f"{CREDENTIALS_FILE} does not exist in {directory}"
        credentials = None
    except Refused as refused:
        reason = str(refused)
        credentials = None
    if credentials is None:
        for name in profiles:
            errors[name] = reason
        return

    for name, profile in profiles.items():
        value = credentials.get(profile.credential)
        where = f"{CREDENTIALS_FILE}: credential {profile.credential!r}"
        if profile.credential not in credentials:
            errors[name] = f"credential {profile.credential!r} is not in {CREDENTIALS_FILE}"
        elif not isinstance(value, str):
            errors[name] = f"{where} must be a string holding the bot token"
        elif (problem := profile_section(profile.channel_type).credential(value)) is not None:
            errors[name] = f"{where} {problem}"  # the type's words about the value, never the value
        else:
            tokens[name] = Secret(value)

    # Telegram lets one poller per bot call getUpdates (a second one gets 409),
    # so two profiles on one bot would fight over its updates: refuse both.
    by_token: dict[Secret, list[str]] = {}
    for name, token in tokens.items():
        by_token.setdefault(token, []).append(name)
    for names in by_token.values():
        if len(names) > 1:
            for name in names:
                others = ", ".join(repr(other) for other in names if other != name)
                errors[name] = (
                    f"{CREDENTIALS_FILE}: profile {name!r} uses the same bot token as {others}; "
                    "one bot serves one profile"
                )
                del tokens[name]


def _parse_credentials(raw: str) -> dict[str, Any]:
    try:
        return tomllib.loads(raw)
    except tomllib.TOMLDecodeError as exc:
        # The parser's message can quote the text it stopped at, which may be a
        # token: keep only the position.
        match = _TOML_POSITION.search(str(exc))
        position = f" at {match.group(1)}" if match else ""
        raise Refused(f"{CREDENTIALS_FILE}: invalid TOML{position}") from None


def _mask(text: str) -> str:
    """Hide anything token-shaped in text that came from channels.toml (keys, parser messages)."""
    return _TOKEN_LIKE.sub("****", text)
