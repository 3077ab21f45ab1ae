"""The text work of plugins/modules/provision_apt_components.py (the custom module the roles use to enable Debian's
contrib/non-free/non-free-firmware components): parsing both source formats, what is added where, idempotence and
taking back exactly what was added."""

from __future__ import annotations

import json

import pytest

from tests.support import modules

mod = modules.module("provision_apt_components")
sources = modules.utils("sources")

WANTED = ["contrib", "non-free", "non-free-firmware"]
SOURCES = "/etc/apt/sources.list.d/debian.sources"
LIST = "/etc/apt/sources.list"

STOCK_TRIXIE = """\
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie trixie-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: trixie-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""

STOCK_BOOKWORM_LIST = """\
# See sources.list(5)
deb http://deb.debian.org/debian bookworm main
deb-src http://deb.debian.org/debian bookworm main

deb http://deb.debian.org/debian bookworm-updates main   # updates
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://security.debian.org/debian-security bookworm-security main
"""


def ensure(files, codename="trixie", record=None, components=WANTED, **kw):
    return mod.ensure(files, components, codename, record or {}, **kw)


def components_of(fmt, text):
    return [e.components for e in sources.parse(fmt, text)]


def test_deb822_single_stanza_gets_the_components_on_its_components_line():
    text = "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main\n"
    new, record, added, own = ensure({SOURCES: text})
    assert new[SOURCES] == "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: trixie\nComponents: main contrib non-free non-free-firmware\n"
    assert added[SOURCES] == [{"entry": "stanza 1: deb http://deb.debian.org/debian trixie", "components": WANTED}]
    assert [e["added"] for e in record["entries"]] == [WANTED]


def test_deb822_multiple_stanzas_each_get_the_components_and_the_rest_is_kept():
    new, _, added, own = ensure({SOURCES: STOCK_TRIXIE})
    assert len(own) == 2 and len(added[SOURCES]) == 2
    assert new[SOURCES] == STOCK_TRIXIE.replace("Components: main\n", "Components: main contrib non-free non-free-firmware\n")


def test_deb822_comments_continuation_lines_and_field_case():
    text = (
        "# Debian's archive\n"
        "types: deb deb-src\n"
        "URIs: https://deb.debian.org/debian\n"
        "# the release and its updates\n"
        "Suites: trixie\n"
        "  trixie-updates\n"
        "Components:\n"
        "  main\n"
        "Signed-By:\n"
        " -----BEGIN PGP PUBLIC KEY BLOCK-----\n"
        " .\n"
        " xsFNBF\n"
        " -----END PGP PUBLIC KEY BLOCK-----\n"
    )
    (entry,) = sources.parse_deb822(text)
    assert entry.types == ["deb", "deb-src"] and entry.suites == ["trixie", "trixie-updates"] and entry.components == ["main"]
    new, record, _, _ = ensure({SOURCES: text})
    assert new[SOURCES] == text.replace("  main\n", "  main contrib non-free non-free-firmware\n")
    back, _, _ = mod.revert(new, record)
    assert back[SOURCES] == text


def test_disabled_stanza_is_left_alone():
    text = STOCK_TRIXIE.replace("Suites: trixie-security\n", "Suites: trixie-security\nEnabled: no\n")
    new, _, added, own = ensure({SOURCES: text})
    assert len(own) == 1
    stanzas = components_of("deb822", new[SOURCES])
    assert stanzas == [["main", *WANTED], ["main"]]


def test_only_disabled_or_commented_entries_mean_no_archive():
    text = STOCK_TRIXIE.replace("Components: main\n", "Components: main\nEnabled: no\n")
    new, _, added, own = ensure({SOURCES: text, LIST: "# deb http://deb.debian.org/debian trixie main\n"})
    assert own == [] and new == {} and added == {}
    message = mod.missing_archive_message("trixie", WANTED, "/etc/apt", ["x stanza 1"])
    assert "trixie-security" in message and "Components: main contrib non-free non-free-firmware" in message
    assert "only disabled" in message


def test_legacy_list_deb_and_deb_src_lines_with_options_and_comments():
    new, record, added, own = ensure({LIST: STOCK_BOOKWORM_LIST}, codename="bookworm")
    assert len(own) == 4
    extra = " contrib non-free non-free-firmware"
    assert new[LIST] == (
        "# See sources.list(5)\n"
        f"deb http://deb.debian.org/debian bookworm main{extra}\n"
        f"deb-src http://deb.debian.org/debian bookworm main{extra}\n"
        "\n"
        f"deb http://deb.debian.org/debian bookworm-updates main{extra}   # updates\n"
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://security.debian.org/debian-security "
        f"bookworm-security main{extra}\n"
    )
    assert [e["index"] for e in record["entries"]] == [1, 2, 4, 5]


def test_bracketed_options_with_spaces_are_skipped():
    (entry,) = sources.parse_list("deb [ arch=amd64 signed-by=/k.gpg ] http://deb.debian.org/debian trixie main\n")
    assert entry.uris == ["http://deb.debian.org/debian"] and entry.suites == ["trixie"] and entry.components == ["main"]


def test_both_formats_present_each_entry_gets_what_it_lacks():
    files = {SOURCES: STOCK_TRIXIE, LIST: "deb http://deb.debian.org/debian-security trixie-security main non-free\n"}
    new, _, added, _ = ensure(files)
    # The security suite is covered by the .list line (sources.list comes first): that line gets what it lacks and
    # the security stanza nothing, so no component is configured twice for one suite.
    assert components_of("deb822", new[SOURCES]) == [["main", *WANTED], ["main"]]
    assert components_of("list", new[LIST]) == [["main", "non-free", "contrib", "non-free-firmware"]]
    assert [len(v) for v in added.values()] == [1, 1]


def test_a_component_the_user_already_has_is_not_duplicated():
    text = "deb http://deb.debian.org/debian trixie main non-free\n"
    new, record, added, _ = ensure({LIST: text})
    assert new[LIST] == "deb http://deb.debian.org/debian trixie main non-free contrib non-free-firmware\n"
    assert record["entries"][0]["added"] == ["contrib", "non-free-firmware"]
    # ... and taking back removes only what was added: the user's non-free stays.
    back, after, removed = mod.revert(new, record)
    assert back[LIST] == text and after["entries"] == []


def test_user_component_from_another_entry_for_the_same_suite_counts():
    files = {
        LIST: "deb http://deb.debian.org/debian trixie main\ndeb http://deb.debian.org/debian trixie contrib non-free non-free-firmware\n"
    }
    new, _, added, own = ensure(files)
    assert new == {} and added == {} and len(own) == 1


@pytest.mark.parametrize(
    "line",
    [
        "deb http://archive.ubuntu.com/ubuntu noble main restricted",
        "deb https://download.docker.com/linux/debian trixie stable",
        "deb https://repo.jellyfin.org/debian trixie main",  # a third party reusing the codename and "main"
        "deb https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/ /",
        "deb http://deb.debian.org/debian sid main",  # another release
        "deb http://deb.debian.org/debian trixie-backports main",
    ],
)
def test_other_entries_are_untouched(line):
    text = f"{line}\ndeb http://deb.debian.org/debian trixie main\n"
    new, _, _, own = ensure({LIST: text})
    assert new[LIST].splitlines()[0] == line and len(own) == 1


def test_a_mirror_is_the_archive_when_named_or_when_its_release_file_says_so():
    text = "deb http://mirror.example.net/debian trixie main\n"
    assert ensure({LIST: text})[3] == []
    assert len(ensure({LIST: text}, mirrors=["http://mirror.example.net/debian/"])[3]) == 1
    origins = {("http://mirror.example.net/debian", "trixie"): "Debian"}
    assert len(ensure({LIST: text}, origins=origins)[3]) == 1
    assert mod.list_file_name("http://mirror.example.net/debian/", "trixie") == "mirror.example.net_debian_dists_trixie_InRelease"
    assert mod.release_origin("-----BEGIN PGP SIGNED MESSAGE-----\nHash: SHA512\n\nOrigin: Debian\nLabel: Debian\n") == "Debian"


def test_idempotent_second_run_changes_nothing_and_keeps_the_record():
    files = {SOURCES: STOCK_TRIXIE, LIST: "deb http://deb.debian.org/debian trixie main\n"}
    new, record, _, _ = ensure(files)
    again, record2, added2, own2 = ensure({**files, **new}, record=json.loads(json.dumps(record)))
    assert again == {} and added2 == {} and record2 == record and own2


def test_a_later_run_with_more_components_extends_the_record():
    text = "deb http://deb.debian.org/debian trixie main\n"
    new, record, _, _ = ensure({LIST: text}, components=["contrib"])
    new2, record2, _, _ = ensure(new, record=record, components=["contrib", "non-free"])
    assert new2[LIST] == "deb http://deb.debian.org/debian trixie main contrib non-free\n"
    assert record2["entries"][0]["added"] == ["contrib", "non-free"] and len(record2["entries"]) == 1
    back, _, _ = mod.revert(new2, record2)
    assert back[LIST] == text


def test_revert_removes_only_what_it_added_and_only_the_named_components():
    files = {SOURCES: STOCK_TRIXIE}
    new, record, _, _ = ensure(files)
    edited = new[SOURCES].replace("Signed-By", "# a note the user added later\nSigned-By", 1)
    back, rest, removed = mod.revert({SOURCES: edited}, record, ["non-free-firmware"])
    assert components_of("deb822", back[SOURCES]) == [["main", "contrib", "non-free"]] * 2
    assert "# a note the user added later" in back[SOURCES]
    assert [e["added"] for e in rest["entries"]] == [["contrib", "non-free"]] * 2
    back2, rest2, _ = mod.revert(back, rest)
    assert back2[SOURCES] == STOCK_TRIXIE.replace("Signed-By", "# a note the user added later\nSigned-By", 1)
    assert rest2["entries"] == []


def test_revert_when_the_user_removed_the_entry_or_component_changes_nothing():
    new, record, _, _ = ensure({LIST: "deb http://deb.debian.org/debian trixie main\n"})
    back, rest, removed = mod.revert({LIST: "deb http://deb.debian.org/debian trixie main\n"}, record)
    assert back == {} and removed == {} and rest["entries"] == []
    back, _, removed = mod.revert({}, record)
    assert back == {} and removed == {}


def test_lists_missing_until_apt_has_an_index_for_each_wanted_component():
    (entry,) = sources.parse_list("deb http://deb.debian.org/debian-security trixie-security main\n")
    prefix = "deb.debian.org_debian-security_dists_trixie-security_"
    names = {prefix + "InRelease", prefix + "main_binary-amd64_Packages"}
    assert mod.lists_missing([entry], ["contrib", "non-free"], names) == [
        "http://deb.debian.org/debian-security trixie-security contrib",
        "http://deb.debian.org/debian-security trixie-security non-free",
    ]
    # After `apt-get update`: contrib has an index; non-free is empty in the suite, so apt keeps no file for it.
    release = (
        "SHA256:\n"
        " e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855        0 non-free/binary-amd64/Packages\n"
        " 0040f94d11d0039505328a90b2ff48968db873e9e7967307631bf40ef5679275       32 non-free/binary-amd64/Packages.xz\n"
    )
    names.add(prefix + "contrib_binary-amd64_Packages")
    assert mod.lists_missing([entry], ["contrib", "non-free"], names, {("http://deb.debian.org/debian-security", "trixie-security"): release}) == []
    assert mod.lists_missing([entry], ["contrib", "non-free"], names) == ["http://deb.debian.org/debian-security trixie-security non-free"]


def test_missing_archive_message_says_what_to_add():
    message = mod.missing_archive_message("bookworm", ["contrib", "non-free"], "/etc/apt", [])
    assert "Suites: bookworm bookworm-updates" in message and "Components: main contrib non-free" in message
    assert "debian-security" in message and "only disabled" not in message
