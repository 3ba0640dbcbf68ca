"""Loading channels.toml and credentials.toml: defaults, refusals with one-line reasons, and no token leaks."""

from __future__ import annotations

import copy
import os
import pickle
from pathlib import Path

import pytest

from piwf_actors.channels.config import (
    ChannelsConfig,
    Secret,
    TelegramProfile,
    default_config_dir,
    load_channels,
)

TOKEN = "424242:SECRET-zz9-plural-z-alpha"  # distinctive, grepped for in every message
OTHER_TOKEN = "777:another-SECRET-token"

OPS = """
[telegram.ops]
credential = "ops_bot"
allowed_user_ids = [1001]
allowed_chat_ids = [2002]
audiences = ["operator"]
"""

running_as_root = pytest.mark.skipif(os.getuid() != 0, reason="needs root to own files as another uid")


def write(directory: Path, channels: str | None = OPS, credentials: str | None = None, mode: int = 0o600) -> Path:
    if channels is not None:
        (directory / "channels.toml").write_text(channels)
        os.chmod(directory / "channels.toml", 0o644)
    if credentials is not None:
        path = directory / "credentials.toml"
        path.write_text(credentials)
        os.chmod(path, mode)
    return directory


def creds(token: str = TOKEN) -> str:
    return f'ops_bot = "{token}"\n'


def everything_printed(config: ChannelsConfig) -> str:
    return "\n".join([repr(config), str(config), str(config.errors), str(config.file_error), *config.errors.values()])


def assert_one_line_without_token(config: ChannelsConfig) -> None:
    reasons = [*config.errors.values(), *([config.file_error] if config.file_error else [])]
    for reason in reasons:
        assert "\n" not in reason
    assert TOKEN not in everything_printed(config)
    assert "SECRET" not in everything_printed(config)


# --- where the files are ------------------------------------------------------


def test_default_config_dir_prefers_piwf_config_dir() -> None:
    env = {"PIWF_CONFIG_DIR": "/etc/piwf-here", "XDG_CONFIG_HOME": "/xdg", "HOME": "/home/u"}
    assert default_config_dir(env) == Path("/etc/piwf-here")


def test_default_config_dir_falls_back_to_xdg_then_home() -> None:
    assert default_config_dir({"XDG_CONFIG_HOME": "/xdg", "HOME": "/home/u"}) == Path("/xdg/piwf")
    assert default_config_dir({"HOME": "/home/u"}) == Path("/home/u/.config/piwf")
    # Empty values count as unset, as in the XDG spec.
    assert default_config_dir({"PIWF_CONFIG_DIR": "", "XDG_CONFIG_HOME": "", "HOME": "/home/u"}) == Path(
        "/home/u/.config/piwf"
    )


def test_default_config_dir_reads_os_environ(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PIWF_CONFIG_DIR", str(tmp_path))
    assert default_config_dir() == tmp_path
    write(tmp_path, credentials=creds())
    assert load_channels().startable() == ["ops"]


# --- loading ------------------------------------------------------------------


def test_no_channels_file_means_unconfigured(tmp_path: Path) -> None:
    config = load_channels(tmp_path)
    assert config == ChannelsConfig(tmp_path, False, {}, {}, {}, None)
    assert config.startable() == []


def test_good_profile_loads_with_its_token(tmp_path: Path) -> None:
    write(tmp_path, credentials=creds())
    config = load_channels(tmp_path)
    assert config.configured and config.file_error is None and config.errors == {}
    assert config.profiles == {
        "ops": TelegramProfile("ops", "ops_bot", frozenset({"1001"}), ("2002",), frozenset({"operator"}))
    }
    assert config.tokens["ops"].reveal() == TOKEN
    assert config.startable() == ["ops"]
    assert_one_line_without_token(config)


def test_chat_order_is_kept_and_negative_group_ids_are_accepted(tmp_path: Path) -> None:
    write(tmp_path, OPS.replace("[2002]", "[2002, -1001234, 5]"), creds())
    profile = load_channels(tmp_path).profiles["ops"]
    assert profile.allowed_chat_ids == ("2002", "-1001234", "5")


def test_empty_telegram_table_is_configured_and_does_not_read_credentials(tmp_path: Path) -> None:
    write(tmp_path, "[telegram]\n", "this is = not toml", mode=0o666)
    config = load_channels(tmp_path)
    assert config.configured and config.profiles == {} and config.errors == {} and config.file_error is None


def test_credentials_not_read_when_every_profile_is_broken(tmp_path: Path) -> None:
    write(tmp_path, OPS.replace("[1001]", "[]"), creds(), mode=0o644)
    config = load_channels(tmp_path)
    assert list(config.errors) == ["ops"]
    assert "credentials.toml" not in config.errors["ops"]


# --- routing and authorization ----------------------------------------------------


def test_routes_by_audience_and_star_routes_everything() -> None:
    ops = TelegramProfile("ops", "b", frozenset({1}), (2,), frozenset({"operator", "finance"}))
    assert ops.routes("operator") and ops.routes("finance")
    assert not ops.routes("legal") and not ops.routes(None)
    everyone = TelegramProfile("all", "b", frozenset({1}), (2,), frozenset({"*"}))
    assert everyone.routes("legal") and everyone.routes(None) and everyone.routes("operator")


def test_allows_needs_both_user_and_chat() -> None:
    ops = TelegramProfile("ops", "b", frozenset({"1001", "1002"}), ("2002", "-300"), frozenset({"*"}))
    assert ops.allows("1001", "2002") and ops.allows("1002", "-300")
    assert not ops.allows("1001", "9999")  # right user, wrong chat
    assert not ops.allows("9999", "2002")  # right chat, wrong user


# --- credentials.toml refusals ----------------------------------------------------


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604])
def test_credentials_readable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    write(tmp_path, credentials=creds(), mode=mode)
    config = load_channels(tmp_path)
    assert config.startable() == [] and config.tokens == {}
    assert "ops" in config.profiles  # it parsed; it just cannot start
    assert config.errors["ops"] == (
        f"credentials.toml is readable by group or others (mode {mode:04o}); run chmod 600 on it"
    )
    assert_one_line_without_token(config)


def test_credentials_writable_by_group_is_refused_too(tmp_path: Path) -> None:
    write(tmp_path, credentials=creds(), mode=0o620)
    assert load_channels(tmp_path).errors["ops"] == (
        "credentials.toml is accessible by group or others (mode 0620); run chmod 600 on it"
    )


def test_credentials_mode_400_is_fine(tmp_path: Path) -> None:
    write(tmp_path, credentials=creds(), mode=0o400)
    assert load_channels(tmp_path).startable() == ["ops"]


@running_as_root  # as another user, channels.toml (owned by that user, not root) would be refused first
def test_credentials_owned_by_another_uid_is_refused(tmp_path: Path) -> None:
    write(tmp_path, credentials=creds())
    config = load_channels(tmp_path, uid=1000)
    assert config.file_error is None  # a root-owned channels.toml is accepted
    assert config.errors["ops"] == "credentials.toml is owned by uid 0, not the host's uid 1000"
    assert_one_line_without_token(config)


def test_symlinked_credentials_are_refused(tmp_path: Path) -> None:
    real = tmp_path / "elsewhere.toml"
    real.write_text(creds())
    os.chmod(real, 0o600)
    write(tmp_path)
    (tmp_path / "credentials.toml").symlink_to(real)
    config = load_channels(tmp_path)
    assert config.startable() == []
    assert config.errors["ops"] == "credentials.toml is a symbolic link; replace it with the file itself (mode 600)"


def test_credentials_that_are_not_a_regular_file_are_refused_without_blocking(tmp_path: Path) -> None:
    write(tmp_path)
    os.mkfifo(tmp_path / "credentials.toml", 0o600)  # opening a FIFO for reading would block without O_NONBLOCK
    assert load_channels(tmp_path).errors["ops"] == "credentials.toml is not a regular file"


def test_missing_credentials_file(tmp_path: Path) -> None:
    write(tmp_path)
    config = load_channels(tmp_path)
    assert config.errors["ops"] == f"credentials.toml does not exist in {tmp_path}"


def test_missing_credential_key(tmp_path: Path) -> None:
    write(tmp_path, credentials=f'other_bot = "{TOKEN}"\n')
    config = load_channels(tmp_path)
    assert config.errors["ops"] == "credential 'ops_bot' is not in credentials.toml"
    assert_one_line_without_token(config)


@pytest.mark.parametrize(
    "value",
    ['"SECRET-no-digits-colon"', '"424242:SECRET with space"', '""', "424242", '["424242:SECRET-in-a-list"]'],
)
def test_credential_that_is_not_a_token_is_refused_without_showing_it(tmp_path: Path, value: str) -> None:
    write(tmp_path, credentials=f"ops_bot = {value}\n")
    config = load_channels(tmp_path)
    reason = config.errors["ops"]
    assert reason.startswith("credentials.toml: credential 'ops_bot' ")
    assert "SECRET" not in reason and "424242" not in reason


def test_invalid_toml_in_credentials_reports_only_the_position(tmp_path: Path) -> None:
    # tomllib quotes a table declared twice in its message; here that table is named by the token.
    write(tmp_path, credentials=f'ops_bot = "{TOKEN}"\n["{TOKEN}"]\n["{TOKEN}"]\n')
    config = load_channels(tmp_path)
    assert config.errors["ops"] == "credentials.toml: invalid TOML at line 3, column 36"
    assert_one_line_without_token(config)
    write(tmp_path, credentials=f'x = {{a = 1, "{TOKEN}" = 1, "{TOKEN}" = 2}}\n')
    config = load_channels(tmp_path)
    assert config.errors["ops"] == "credentials.toml: invalid TOML at line 1, column 91"
    assert_one_line_without_token(config)


def test_credentials_not_utf8_are_refused(tmp_path: Path) -> None:
    write(tmp_path, credentials="")
    (tmp_path / "credentials.toml").write_bytes(b'ops_bot = "424242:\xffSECRET"\n')
    assert load_channels(tmp_path).errors["ops"] == "credentials.toml is not valid UTF-8"


def test_two_profiles_on_one_bot_are_both_refused(tmp_path: Path) -> None:
    second = OPS.replace("telegram.ops", "telegram.finance").replace('"ops_bot"', '"finance_bot"')
    write(tmp_path, OPS + second, f'ops_bot = "{TOKEN}"\nfinance_bot = "{TOKEN}"\n')
    config = load_channels(tmp_path)
    assert config.startable() == [] and config.tokens == {}
    assert "same bot token as 'finance'" in config.errors["ops"]
    assert "same bot token as 'ops'" in config.errors["finance"]
    assert_one_line_without_token(config)


# --- the config directory ------------------------------------------------------------


def config_dir(tmp_path: Path, mode: int) -> Path:
    directory = tmp_path / "piwf"
    directory.mkdir()
    write(directory, credentials=creds())
    os.chmod(directory, mode)
    return directory


@pytest.mark.parametrize("mode", [0o777, 0o775, 0o757, 0o1777], ids=oct)  # the sticky bit does not make it safe
def test_config_directory_writable_by_group_or_others_is_a_file_error(tmp_path: Path, mode: int) -> None:
    # Whoever can write the directory can rename channels.toml away and put their own in its place.
    directory = config_dir(tmp_path, mode)
    config = load_channels(directory)
    assert config.configured and config.profiles == {} and config.tokens == {} and config.errors == {}
    assert config.startable() == []
    assert config.file_error == (
        f"config directory {directory} is writable by group or others (mode {mode:04o}); run chmod go-w {directory}"
    )
    assert_one_line_without_token(config)


@pytest.mark.parametrize("mode", [0o755, 0o700, 0o750, 0o500], ids=oct)
def test_config_directory_not_writable_by_group_or_others_is_fine(tmp_path: Path, mode: int) -> None:
    directory = config_dir(tmp_path, mode)
    config = load_channels(directory)
    assert config.file_error is None and config.errors == {}
    assert config.startable() == ["ops"]


@running_as_root
def test_config_directory_owned_by_a_stranger_is_a_file_error(tmp_path: Path) -> None:
    directory = config_dir(tmp_path, 0o755)
    for path in (directory / "channels.toml", directory / "credentials.toml"):
        os.chown(path, 1000, -1)  # the files themselves would pass for uid 1000
    os.chown(directory, 4242, -1)
    config = load_channels(directory, uid=1000)
    assert config.configured and config.profiles == {} and config.tokens == {} and config.startable() == []
    assert config.file_error == f"config directory {directory} is owned by uid 4242, not the host's uid 1000 or root"
    assert_one_line_without_token(config)


@running_as_root
@pytest.mark.parametrize("mode", [0o755, 0o700], ids=oct)
def test_config_directory_owned_by_the_host_uid_is_fine(tmp_path: Path, mode: int) -> None:
    directory = config_dir(tmp_path, mode)
    for path in (directory, directory / "channels.toml", directory / "credentials.toml"):
        os.chown(path, 1000, -1)
    config = load_channels(directory, uid=1000)
    assert config.file_error is None and config.startable() == ["ops"]


def test_missing_config_directory_means_unconfigured(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "piwf"
    assert load_channels(missing) == ChannelsConfig(missing, False, {}, {}, {}, None)


def test_lax_config_directory_without_channels_file_means_unconfigured(tmp_path: Path) -> None:
    # An unrelated ~/.config/piwf with a lax mode stays quiet until it holds channels.toml.
    directory = tmp_path / "piwf"
    directory.mkdir()
    write(directory, channels=None, credentials=creds())
    os.chmod(directory, 0o777)
    assert load_channels(directory) == ChannelsConfig(directory, False, {}, {}, {}, None)


def test_config_directory_that_is_a_file_is_a_file_error(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "piwf"
    not_a_dir.write_text(OPS)
    config = load_channels(not_a_dir)
    assert config.configured and config.profiles == {}
    assert config.file_error == f"config directory {not_a_dir} is not a directory"


def test_files_are_read_from_the_directory_that_was_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Swap a lax directory with other files in under the name right after the good one is opened:
    # the files must still come from the directory that was checked, not from whatever the name points to now.
    directory = config_dir(tmp_path, 0o700)
    real_open = os.open
    swapped: list[Path] = []

    def open_then_swap(path: object, flags: int, *args: object, **kwargs: object) -> int:
        fd = real_open(path, flags, *args, **kwargs)  # type: ignore[arg-type]
        if not swapped and Path(os.fsdecode(path)) == directory:  # type: ignore[arg-type]
            directory.rename(tmp_path / "checked")
            directory.mkdir()
            write(directory, OPS.replace("[1001]", "[6666]"), creds(OTHER_TOKEN))
            os.chmod(directory, 0o777)
            swapped.append(directory)
        return fd

    monkeypatch.setattr(os, "open", open_then_swap)
    config = load_channels(directory)
    monkeypatch.undo()
    assert swapped, "load_channels did not open the directory itself"
    assert config.file_error is None and config.startable() == ["ops"]
    assert config.profiles["ops"].allowed_user_ids == frozenset({"1001"})
    assert config.tokens["ops"].reveal() == TOKEN


# --- channels.toml refusals ----------------------------------------------------------


def test_invalid_toml_in_channels_is_a_file_error(tmp_path: Path) -> None:
    write(tmp_path, "[telegram.ops\ncredential = 1\n", creds())
    config = load_channels(tmp_path)
    assert config.configured and config.profiles == {} and config.startable() == []
    assert config.file_error == (
        "channels.toml: invalid TOML: Expected ']' at the end of a table declaration (at line 1, column 14)"
    )


def test_unknown_channel_type_is_a_file_error(tmp_path: Path) -> None:
    write(tmp_path, OPS + '[slack.x]\ncredential = "s"\n', creds())
    config = load_channels(tmp_path)
    assert config.profiles == {}
    assert config.file_error == "channels.toml: unknown channel type 'slack' (known: telegram)"


def test_telegram_that_is_not_a_table_is_a_file_error(tmp_path: Path) -> None:
    write(tmp_path, 'telegram = "ops"\n', creds())
    assert load_channels(tmp_path).file_error == (
        "channels.toml: 'telegram' must be a table of profiles, like [telegram.ops]"
    )


def test_channels_writable_by_others_is_a_file_error(tmp_path: Path) -> None:
    write(tmp_path, credentials=creds())
    os.chmod(tmp_path / "channels.toml", 0o664)
    config = load_channels(tmp_path)
    assert config.profiles == {}
    assert config.file_error == (
        "channels.toml is writable by group or others (mode 0664) and decides who may answer; run chmod go-w on it"
    )


@running_as_root
def test_channels_owned_by_a_stranger_is_a_file_error(tmp_path: Path) -> None:
    write(tmp_path, credentials=creds())
    os.chown(tmp_path / "channels.toml", 4242, -1)
    config = load_channels(tmp_path, uid=1000)
    assert config.file_error == "channels.toml is owned by uid 4242, not the host's uid 1000 or root"


def test_unknown_keys_are_named(tmp_path: Path) -> None:
    write(tmp_path, OPS + 'tokne = "x"\nchat = 1\n', creds())
    config = load_channels(tmp_path)
    assert config.profiles == {}
    assert config.errors["ops"] == "channels.toml: [telegram.ops] unknown keys 'chat', 'tokne'"


def test_missing_keys_are_named(tmp_path: Path) -> None:
    write(tmp_path, '[telegram.ops]\ncredential = "ops_bot"\n', creds())
    assert load_channels(tmp_path).errors["ops"] == (
        "channels.toml: [telegram.ops] missing keys 'allowed_user_ids', 'allowed_chat_ids', 'audiences'"
    )


@pytest.mark.parametrize(
    ("old", "new", "reason"),
    [
        ("[1001]", "[true]", "allowed_user_ids must be a non-empty list of positive integers"),
        ("[1001]", "[]", "allowed_user_ids must be a non-empty list of positive integers"),
        ("[1001]", '["1001"]', "allowed_user_ids must be a non-empty list of positive integers"),
        ("[1001]", "1001", "allowed_user_ids must be a non-empty list of positive integers"),
        ("[1001]", "[-5]", "allowed_user_ids must be a non-empty list of positive integers"),
        ("[2002]", "[false]", "allowed_chat_ids must be a non-empty list of non-zero integers"),
        ("[2002]", "[]", "allowed_chat_ids must be a non-empty list of non-zero integers"),
        ("[2002]", "[2002, 2002]", "allowed_chat_ids lists a chat twice (each decision would be sent twice)"),
        ('["operator"]', "[]", 'audiences must be a non-empty list of non-empty strings ("*" for every audience)'),
        ('["operator"]', '[""]', 'audiences must be a non-empty list of non-empty strings ("*" for every audience)'),
        (
            '["operator"]',
            '"operator"',
            'audiences must be a non-empty list of non-empty strings ("*" for every audience)',
        ),
        ('"ops_bot"', '""', "credential must be a non-empty string"),
        ('"ops_bot"', "7", "credential must be a non-empty string"),
        ('"ops_bot"', '"ops bot"', "credential must be a key of letters, digits, '_' or '-', at most 64 characters"),
    ],
)
def test_bad_values_are_refused(tmp_path: Path, old: str, new: str, reason: str) -> None:
    write(tmp_path, OPS.replace(old, new), creds())
    config = load_channels(tmp_path)
    assert config.profiles == {} and config.startable() == []
    assert config.errors == {"ops": f"channels.toml: [telegram.ops] {reason}"}


def test_several_problems_share_one_line(tmp_path: Path) -> None:
    write(tmp_path, OPS.replace("[1001]", "[true]").replace("[2002]", "[]") + "extra = 1\n", creds())
    reason = load_channels(tmp_path).errors["ops"]
    assert "\n" not in reason
    assert reason == (
        "channels.toml: [telegram.ops] unknown key 'extra'; "
        "allowed_user_ids must be a non-empty list of positive integers; "
        "allowed_chat_ids must be a non-empty list of non-zero integers"
    )


@pytest.mark.parametrize("name", ["Ops", "-ops", "ops.x", "a" * 65, "", "ops bot"])
def test_bad_profile_names_are_refused(tmp_path: Path, name: str) -> None:
    write(tmp_path, OPS.replace("[telegram.ops]", f'[telegram."{name}"]'), creds())
    config = load_channels(tmp_path)
    assert config.profiles == {}
    assert config.errors == {
        name: f"channels.toml: profile name {name!r} in [telegram] must match [a-z0-9][a-z0-9_-]* "
        "and be at most 64 characters"
    }


def test_profile_name_of_64_characters_is_fine(tmp_path: Path) -> None:
    name = "a" * 63 + "9"
    write(tmp_path, OPS.replace("[telegram.ops]", f"[telegram.{name}]"), creds())
    assert load_channels(tmp_path).startable() == [name]


def test_token_pasted_into_channels_toml_is_masked(tmp_path: Path) -> None:
    pasted_as_credential = OPS.replace('"ops_bot"', f'"{TOKEN}"')
    write(tmp_path, pasted_as_credential, creds())
    config = load_channels(tmp_path)
    assert config.errors["ops"] == (
        "channels.toml: [telegram.ops] credential looks like a bot token; "
        "put it in credentials.toml and name its key here"
    )
    assert_one_line_without_token(config)

    for channels in (
        OPS + f'"{TOKEN}" = 1\n',  # as an unknown key
        OPS.replace("[telegram.ops]", f'[telegram."{TOKEN}"]'),  # as a profile name
        OPS + f'[other."{TOKEN}"]\n',  # as a channel type's profile
        f'["{TOKEN}"]\nx = 1\n',  # as a channel type
        OPS + f'["{TOKEN}"]\n["{TOKEN}"]\n',  # in the TOML parser's message
        f'x = {{a = 1, "{TOKEN}" = 1, "{TOKEN}" = 2}}\n',  # in the TOML parser's message
    ):
        write(tmp_path, channels, creds())
        config = load_channels(tmp_path)
        assert config.errors or config.file_error
        assert_one_line_without_token(config)


def test_one_broken_profile_does_not_stop_the_other(tmp_path: Path) -> None:
    broken = OPS.replace("telegram.ops", "telegram.finance").replace("[1001]", "[true]")
    write(tmp_path, OPS + broken, creds())
    config = load_channels(tmp_path)
    assert config.startable() == ["ops"]
    assert list(config.errors) == ["finance"]
    assert config.tokens["ops"].reveal() == TOKEN


def test_one_profile_with_a_missing_credential_does_not_stop_the_other(tmp_path: Path) -> None:
    other = OPS.replace("telegram.ops", "telegram.finance").replace('"ops_bot"', '"finance_bot"')
    write(tmp_path, OPS + other, creds())
    config = load_channels(tmp_path)
    assert config.startable() == ["ops"]
    assert set(config.profiles) == {"ops", "finance"}  # finance parsed, it just has no token
    assert config.errors == {"finance": "credential 'finance_bot' is not in credentials.toml"}


# --- fingerprint --------------------------------------------------------------------


def test_fingerprint_changes_with_a_setting_or_the_token_only(tmp_path: Path) -> None:
    second = OPS.replace("telegram.ops", "telegram.finance").replace('"ops_bot"', '"finance_bot"')
    write(tmp_path, OPS + second, f'ops_bot = "{TOKEN}"\nfinance_bot = "{OTHER_TOKEN}"\n')
    first = load_channels(tmp_path)
    assert first.startable() == ["finance", "ops"]
    assert load_channels(tmp_path).fingerprint("ops") == first.fingerprint("ops")  # unchanged files
    assert first.fingerprint("ops") != first.fingerprint("finance")

    # Reordering or restyling the files changes nothing.
    write(tmp_path, second + OPS.replace("[1001]", "[ 1001 ]"), f'finance_bot = "{OTHER_TOKEN}"\nops_bot = "{TOKEN}"\n')
    same = load_channels(tmp_path)
    assert same.fingerprint("ops") == first.fingerprint("ops")
    assert same.fingerprint("finance") == first.fingerprint("finance")

    # A new token for ops: only ops changes.
    write(tmp_path, OPS + second, f'ops_bot = "{TOKEN}x"\nfinance_bot = "{OTHER_TOKEN}"\n')
    new_token = load_channels(tmp_path)
    assert new_token.fingerprint("ops") != first.fingerprint("ops")
    assert new_token.fingerprint("finance") == first.fingerprint("finance")

    # A setting of finance changes: only finance changes.
    write(
        tmp_path,
        OPS + second.replace('["operator"]', '["operator", "legal"]'),
        creds() + f'finance_bot = "{OTHER_TOKEN}"\n',
    )
    new_setting = load_channels(tmp_path)
    assert new_setting.fingerprint("ops") == first.fingerprint("ops")
    assert new_setting.fingerprint("finance") != first.fingerprint("finance")

    # The chat order is a setting (decisions go out in that order).
    write(tmp_path, OPS.replace("[2002]", "[2002, 3003]"), creds())
    forward = load_channels(tmp_path).fingerprint("ops")
    write(tmp_path, OPS.replace("[2002]", "[3003, 2002]"), creds())
    assert load_channels(tmp_path).fingerprint("ops") != forward


def test_fingerprint_tells_a_profile_that_lost_its_token(tmp_path: Path) -> None:
    write(tmp_path, credentials=creds())
    good = load_channels(tmp_path)
    os.chmod(tmp_path / "credentials.toml", 0o644)
    refused = load_channels(tmp_path)
    assert refused.fingerprint("ops") != good.fingerprint("ops")
    with pytest.raises(KeyError, match="'nope'"):
        good.fingerprint("nope")


def test_fingerprint_does_not_contain_the_token(tmp_path: Path) -> None:
    write(tmp_path, credentials=creds())
    digest = load_channels(tmp_path).fingerprint("ops")
    assert len(digest) == 64 and TOKEN not in digest


# --- Secret ----------------------------------------------------------------------------


def test_secret_never_prints_its_value() -> None:
    secret = Secret(TOKEN)
    assert repr(secret) == str(secret) == f"{secret}" == "Secret('****')"
    assert secret.reveal() == TOKEN
    assert secret == Secret(TOKEN) and secret != Secret(OTHER_TOKEN) and hash(secret) == hash(Secret(TOKEN))
    assert copy.deepcopy(secret) is secret and copy.copy(secret) is secret
    with pytest.raises(AttributeError):
        secret._value = "x"  # type: ignore[misc]
    with pytest.raises(TypeError) as refused:
        pickle.dumps(secret)
    assert TOKEN not in str(refused.value)
    with pytest.raises(TypeError) as wrong_type:
        Secret(424242)  # type: ignore[arg-type]
    assert "424242" not in str(wrong_type.value)


def test_config_repr_hides_the_token(tmp_path: Path) -> None:
    write(tmp_path, credentials=creds())
    config = load_channels(tmp_path)
    assert "Secret('****')" in repr(config)
    assert_one_line_without_token(config)
