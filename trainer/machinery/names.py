"""Kubernetes' string rules: k8s.io/apimachinery/pkg/util/validation (DNS-1123 labels and
subdomains, DNS-1035 labels, qualified names, label values, ConfigMap keys, domain-prefixed
paths) and the
``ValidateNameFunc`` s objects are named by, with Kubernetes' exact messages.

Go measures lengths in bytes, so lengths here count UTF-8 bytes; Go's regexp ``$`` never
matches before a trailing newline, so patterns are matched with ``fullmatch``. Verdicts on
short label keys and values are remembered: the same labels come back on every write.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from typing import Final

from trainer.machinery.errors import INVALID, REQUIRED, FieldError

# --- k8s.io/apimachinery/pkg/util/validation ---------------------------------------------------

DNS1123_LABEL_FMT: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FMT: Final = DNS1123_LABEL_FMT + "(\\." + DNS1123_LABEL_FMT + ")*"
DNS1035_LABEL_FMT: Final = "[a-z]([-a-z0-9]*[a-z0-9])?"
QNAME_CHAR_FMT: Final = "[A-Za-z0-9]"
QNAME_EXT_CHAR_FMT: Final = "[-A-Za-z0-9_.]"
QUALIFIED_NAME_FMT: Final = f"({QNAME_CHAR_FMT}{QNAME_EXT_CHAR_FMT}*)?{QNAME_CHAR_FMT}"
LABEL_VALUE_FMT: Final = f"({QUALIFIED_NAME_FMT})?"
CONFIG_MAP_KEY_FMT: Final = "[-._a-zA-Z0-9]+"
HTTP_PATH_FMT: Final = "[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+"

DNS1123_LABEL_MAX: Final = 63
DNS1123_SUBDOMAIN_MAX: Final = 253
DNS1035_LABEL_MAX: Final = 63
QUALIFIED_NAME_MAX: Final = 63
LABEL_VALUE_MAX: Final = 63
TOTAL_ANNOTATION_SIZE: Final = 256 * 1024
FIELD_MANAGER_MAX: Final = 128
SUBRESOURCE_NAME_MAX: Final = 256

_DNS1123_LABEL = re.compile(DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN = re.compile(DNS1123_SUBDOMAIN_FMT)
_DNS1035_LABEL = re.compile(DNS1035_LABEL_FMT)
_QUALIFIED_NAME = re.compile(QUALIFIED_NAME_FMT)
_LABEL_VALUE = re.compile(LABEL_VALUE_FMT)
_CONFIG_MAP_KEY = re.compile(CONFIG_MAP_KEY_FMT)
_HTTP_PATH = re.compile(HTTP_PATH_FMT)

QUALIFIED_NAME_MSG: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
LABEL_VALUE_MSG: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)
DNS1123_LABEL_MSG: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character"
)
DNS1123_SUBDOMAIN_MSG: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character"
)
DNS1035_LABEL_MSG: Final = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character"
)
CONFIG_MAP_KEY_MSG: Final = (
    "a valid config key must consist of alphanumeric characters, '-', '_' or '.'"
)
NEGATIVE_MSG: Final = "must be greater than or equal to 0"


def byte_length(value: str) -> int:
    return len(value.encode("utf-8", "surrogatepass"))


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    """``validation.RegexError``."""
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown[:-2]}, regex used for validation is '{fmt}')"


def max_len_error(n: int) -> str:
    return f"must be no more than {n} characters"


def is_dns1123_label(value: str) -> list[str]:
    errs = []
    if byte_length(value) > DNS1123_LABEL_MAX:
        errs.append(max_len_error(DNS1123_LABEL_MAX))
    if not _DNS1123_LABEL.fullmatch(value):
        errs.append(regex_error(DNS1123_LABEL_MSG, DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if byte_length(value) > DNS1123_SUBDOMAIN_MAX:
        errs.append(max_len_error(DNS1123_SUBDOMAIN_MAX))
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        errs.append(regex_error(DNS1123_SUBDOMAIN_MSG, DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def is_dns1035_label(value: str) -> list[str]:
    errs = []
    if byte_length(value) > DNS1035_LABEL_MAX:
        errs.append(max_len_error(DNS1035_LABEL_MAX))
    if not _DNS1035_LABEL.fullmatch(value):
        errs.append(regex_error(DNS1035_LABEL_MSG, DNS1035_LABEL_FMT, "my-name", "abc-123"))
    return errs


def is_qualified_name(value: str) -> list[str]:
    """``validation.IsQualifiedName``: ``[prefix/]name`` (label keys, annotation keys,
    finalizers)."""
    return list(_qualified_name(value)) if len(value) <= _CACHED_LENGTH else _is_qualified(value)


def is_valid_label_value(value: str) -> list[str]:
    return list(_label_value(value)) if len(value) <= _CACHED_LENGTH else _is_label_value(value)


#: Keys and values up to this long have their verdict remembered: the same labels come back
#: on every write of an object and across objects.
_CACHED_LENGTH = 317


@functools.lru_cache(maxsize=4096)
def _qualified_name(value: str) -> tuple[str, ...]:
    return tuple(_is_qualified(value))


@functools.lru_cache(maxsize=4096)
def _label_value(value: str) -> tuple[str, ...]:
    return tuple(_is_label_value(value))


def _is_qualified(value: str) -> list[str]:
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += [f"prefix part {m}" for m in is_dns1123_subdomain(prefix)]
    else:
        return [
            "a qualified name "
            + regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif byte_length(name) > QUALIFIED_NAME_MAX:
        errs.append(f"name part {max_len_error(QUALIFIED_NAME_MAX)}")
    if not _QUALIFIED_NAME.fullmatch(name):
        errs.append(
            "name part "
            + regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def _is_label_value(value: str) -> list[str]:
    errs = []
    if byte_length(value) > LABEL_VALUE_MAX:
        errs.append(max_len_error(LABEL_VALUE_MAX))
    if not _LABEL_VALUE.fullmatch(value):
        errs.append(regex_error(LABEL_VALUE_MSG, LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


def is_config_map_key(value: str) -> list[str]:
    """Keys of ConfigMap and Secret data."""
    errs = []
    if byte_length(value) > DNS1123_SUBDOMAIN_MAX:
        errs.append(max_len_error(DNS1123_SUBDOMAIN_MAX))
    if not _CONFIG_MAP_KEY.fullmatch(value):
        errs.append(
            regex_error(CONFIG_MAP_KEY_MSG, CONFIG_MAP_KEY_FMT, "key.name", "KEY_NAME", "key-name")
        )
    if value == ".":
        errs.append("must not be '.'")
    elif value == "..":
        errs.append("must not be '..'")
    elif value.startswith(".."):
        errs.append("must not start with '..'")
    return errs


def domain_prefixed_path_errors(path: str, value: str) -> list[FieldError]:
    """``validation.IsDomainPrefixedPath`` at ``path``: ``<DNS-1123 subdomain>/<HTTP path>``;
    ``acme.io/manager`` passes, ``kueue.k8s.io/`` (empty path), ``manager`` (no domain) and
    ``Acme.io/x`` fail."""
    if not value:
        return [FieldError(path, REQUIRED, "")]
    if len(value) <= _REMEMBERED_LENGTH and _valid_domain_prefixed_path(value):
        return []
    host, sep, rest = value.partition("/")
    if not sep or not host or not rest:
        return [
            FieldError(
                path, INVALID, 'must be a domain-prefixed path (such as "acme.io/foo")', value
            )
        ]
    errors = [FieldError(path, INVALID, msg, host) for msg in is_dns1123_subdomain(host)]
    if not _HTTP_PATH.fullmatch(rest):
        errors.append(FieldError(path, INVALID, regex_error("Invalid path", HTTP_PATH_FMT), rest))
    return errors


#: Paths up to this long are remembered once found valid (every Kueue-patched TrainJob names
#: the same manager); the bound keeps the memory small whatever clients send.
_REMEMBERED_LENGTH = 128


@functools.lru_cache(maxsize=256)
def _valid_domain_prefixed_path(value: str) -> bool:
    host, sep, rest = value.partition("/")
    return bool(
        sep and host and rest and not is_dns1123_subdomain(host) and _HTTP_PATH.fullmatch(rest)
    )


# --- name rules (ValidateNameFunc: name, is it a generateName prefix) ---------------------------

NameRule = Callable[[str, bool], list[str]]


def _mask_trailing_dash(name: str) -> str:
    return name[:-1] + "a" if len(name) > 1 and name.endswith("-") else name


def name_is_dns_subdomain(name: str, prefix: bool) -> list[str]:
    return is_dns1123_subdomain(_mask_trailing_dash(name) if prefix else name)


def name_is_dns_label(name: str, prefix: bool) -> list[str]:
    return is_dns1123_label(_mask_trailing_dash(name) if prefix else name)


def name_is_dns1035_label(name: str, prefix: bool) -> list[str]:
    return is_dns1035_label(_mask_trailing_dash(name) if prefix else name)


def path_segment_name(name: str, prefix: bool) -> list[str]:
    """``path.ValidatePathSegmentName`` (RBAC objects: ``system:aggregate-to-edit``)."""
    if not prefix and name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in name]
