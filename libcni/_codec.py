"""The one ``cattrs`` converter: how every value's JSON form is declared and read.

A frozen ``attrs`` class declares each field's JSON form with :func:`field`:
``key`` (the JSON name), ``always`` (written even when empty; else ``None``,
``""``, ``[]`` and ``{}`` are omitted, ``0`` kept), ``check`` (run on the read
value; raises :class:`Invalid`) and ``dump`` (the writer). An ``extra`` field
keeps the unknown members; ``_decoded(self)`` holds the rules across fields.
Primitives are strict (``"5"`` is no int, ``True`` no number, a string no
list); ``null`` is a field's empty value. The converter is built at its first
use (``import libcni`` spares cattrs); :func:`structure` is the one place that
reads cattrs' errors: an :class:`Invalid` with the JSON ``path`` and ``reason``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache, lru_cache
from ipaddress import IPv4Address, IPv4Interface, IPv6Address, IPv6Interface
from typing import TYPE_CHECKING, Any, TypeVar, get_args, get_origin

import attrs

if TYPE_CHECKING:
    import cattrs

__all__ = ["Invalid", "converter", "field", "known_keys", "short", "structure", "unstructure"]

_T = TypeVar("_T")

#: An address with its prefix length, host bits kept (``10.0.0.5/24``).
IPInterface = IPv4Interface | IPv6Interface
#: A bare IP address (a gateway).
IPAddress = IPv4Address | IPv6Address


class Invalid(ValueError):
    """A value that cannot be read: ``path`` (the JSON path) and ``reason``."""

    def __init__(self, reason: str, path: str = "") -> None:
        super().__init__(f"{path}: {reason}" if path else reason)
        self.reason = reason
        self.path = path


def short(value: Any, limit: int = 120) -> str:
    """``repr(value)``, cut at ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def field(
    *,
    key: str | None = None,
    always: bool = False,
    check: Callable[[Any], Any] | None = None,
    dump: Callable[[Any], Any] | None = None,
    **kwargs: Any,
) -> Any:
    """An ``attrs.field`` with its JSON form declared (see the module documentation)."""
    metadata = {"key": key, "always": always, "check": check, "dump": dump}
    return attrs.field(metadata=metadata, **kwargs)


def _key(a: attrs.Attribute[Any]) -> str:
    return a.metadata.get("key") or a.name


def _fields(cls: type) -> tuple[attrs.Attribute[Any], ...]:
    return tuple(a for a in attrs.fields(cls) if a.name != "extra")


@cache
def known_keys(cls: type) -> frozenset[str]:
    """The JSON names of ``cls``'s fields (what is not in ``extra``)."""
    return frozenset(_key(a) for a in _fields(cls))


def _str(value: Any, _: Any = None) -> str:
    if type(value) is str:
        return value
    raise Invalid(f"must be a string, not {short(value)}")


def _int(value: Any, _: Any = None) -> int:
    if type(value) is not int:
        raise Invalid(f"must be an integer, not {short(value)}")
    return value


def _object(value: Any, _: Any = None) -> dict[str, Any]:
    if type(value) is dict or isinstance(value, Mapping):
        return value  # type: ignore[return-value]
    raise Invalid(f"must be an object, not {short(value)}")


@lru_cache(maxsize=1024)
def _parse_cidr(text: str) -> IPv4Interface | IPv6Interface | None:
    addr, sep, prefix = text.partition("/")
    if not sep or not (prefix.isascii() and prefix.isdigit()) or len(prefix) > 3:
        return None
    try:
        return IPv6Interface(text) if ":" in addr else IPv4Interface(text)
    except ValueError:
        return None


@lru_cache(maxsize=1024)
def _parse_ip(text: str) -> IPv4Address | IPv6Address | None:
    try:
        return IPv6Address(text) if ":" in text else IPv4Address(text)
    except ValueError:
        return None


def _cidr(value: Any, _: Any = None) -> IPv4Interface | IPv6Interface:
    if type(value) is not str:
        if value is None:
            raise Invalid("missing (an address in CIDR form)")
        raise Invalid(f"must be a string in CIDR form, not {short(value)}")
    parsed = _parse_cidr(value)
    if parsed is None:
        raise Invalid(f"invalid CIDR {short(value)}")
    return parsed


def _ip(value: Any, _: Any = None) -> IPv4Address | IPv6Address | None:
    if type(value) is not str:
        if value is None:
            return None
        raise Invalid(f"must be a string (an IP address), not {short(value)}")
    if value == "":
        return None
    parsed = _parse_ip(value)
    if parsed is None:
        raise Invalid(f"invalid IP address {short(value)}")
    return parsed


def _bytes(value: Any, _: Any = None) -> bytes:
    """Standard base64 text (``null``: empty); line breaks skipped, as Go's decoder does."""
    if value is None:
        return b""
    if type(value) is not str:
        raise Invalid(f"must be a base64 string, not {short(value)}")
    if "\n" in value or "\r" in value:
        value = value.replace("\n", "").replace("\r", "")
    import base64  # here: ``import libcni`` spares it (about 0.7 ms)

    try:
        return base64.b64decode(value, validate=True)
    except ValueError as e:  # binascii.Error is one
        raise Invalid(f"is not valid standard base64 ({e})") from None


def _seq_hook(t: Any) -> Callable[[Any, Any], Any]:
    """A homogeneous tuple or list: a JSON array (``null``: empty), items strict."""
    args = get_args(t)
    item_type = args[0] if args else Any
    from cattrs.errors import IterableValidationError, IterableValidationNote

    item = converter().get_structure_hook(item_type)
    make: Any = tuple if get_origin(t) is tuple else list

    def hook(value: Any, _: Any = None) -> Any:
        if value is None:
            return make()
        if type(value) is not list and not isinstance(value, tuple):
            raise Invalid(f"must be a list, not {short(value)}")
        out = []
        for i, v in enumerate(value):
            try:
                out.append(item(v, item_type))
            except Exception as e:  # the first failure, with its index
                notes = [*getattr(e, "__notes__", []), IterableValidationNote("", i, item_type)]
                e.__notes__ = notes  # type: ignore[attr-defined]
                raise IterableValidationError("", [e], t) from None
        return make(out)

    return hook


def _pair_hook(t: Any) -> Callable[[Any, Any], Any]:
    """A fixed-length tuple: a JSON array of exactly that many items."""
    types = get_args(t)
    hooks = [converter().get_structure_hook(x) for x in types]

    def hook(value: Any, _: Any = None) -> Any:
        if type(value) is not list or len(value) != len(types):
            raise Invalid(f"must be a list of {len(types)} items, not {short(value)}")
        return tuple(h(v, x) for h, v, x in zip(hooks, value, types, strict=True))

    return hook


def _is_seq(t: Any) -> bool:
    args = get_args(t)
    return (get_origin(t) is tuple and len(args) == 2 and args[1] is Ellipsis) or get_origin(
        t
    ) is list


def _is_pair(t: Any) -> bool:
    return get_origin(t) is tuple and Ellipsis not in get_args(t)


def _json_check(extra: Mapping[str, Any]) -> None:
    """Refuse an unknown member without a JSON form (NaN, a set, a cycle...)."""
    import json

    for key, value in extra.items():
        try:
            json.dumps(value, allow_nan=False)
        except (ValueError, TypeError, RecursionError) as e:
            raise Invalid(f"value has no JSON form ({e}): {short(value)}", key) from None


def _null_is_default(a: attrs.Attribute[Any], base: Any) -> Any:
    """The hook of a field where JSON ``null`` means the field's default."""
    default: Any = "" if a.type is str else a.default
    make: Callable[[], Any] = (
        default.factory if isinstance(default, attrs.Factory) else lambda: default  # type: ignore[arg-type]
    )

    def hook(v: Any, t: Any) -> Any:
        return make() if v is None else base(v, t)

    return hook


def _checked(base: Any, check: Callable[[Any], Any]) -> Any:
    def hook(v: Any, t: Any) -> Any:
        return check(base(v, t))

    return hook


def _class_hook(cls: type) -> Callable[[Any, Any], Any]:
    from cattrs.gen import make_dict_structure_fn, override

    attrs.resolve_types(cls)
    overrides: dict[str, Any] = {}
    for a in _fields(cls):
        check = a.metadata.get("check")
        hook: Any = None
        if a.type is str or (
            a.default is not attrs.NOTHING and (attrs.has(a.type) or a.type == dict[str, Any])  # type: ignore[arg-type]
        ):
            hook = _null_is_default(a, converter().get_structure_hook(a.type))
        if check is not None:
            hook = _checked(hook or converter().get_structure_hook(a.type), check)

        overrides[a.name] = override(rename=_key(a), struct_hook=hook)
    has_extra = "extra" in attrs.fields_dict(cls)
    if has_extra:
        overrides["extra"] = override(omit=True)
    make: Any = make_dict_structure_fn(cls, converter(), **overrides)
    known = known_keys(cls)
    decoded = getattr(cls, "_decoded", None)

    def structure_class(value: Any, _: Any = None) -> Any:
        if type(value) is not dict and not isinstance(value, Mapping):
            raise Invalid(f"must be an object, not {short(value)}")
        instance = make(value, cls)
        if has_extra:
            extra = {k: v for k, v in value.items() if k not in known}
            if extra:
                _json_check(extra)
                # Frozen: the one write of a structured instance, before anyone sees it.
                object.__setattr__(instance, "extra", extra)
        if decoded is not None:
            instance = decoded(instance)
        return instance

    return structure_class


def _dump_hook(t: Any) -> Callable[[Any], Any] | None:
    """How a field of type ``t`` is written; ``None``: as it is."""
    if t in (IPInterface, IPAddress, IPAddress | None):
        return str
    if t is bytes:
        import base64

        return lambda b: base64.b64encode(b).decode("ascii")
    if attrs.has(t):
        return converter().get_unstructure_hook(t)
    args = get_args(t)
    if args and type(None) in args and len(args) == 2:
        return _dump_hook(args[0] if args[1] is type(None) else args[1])
    if _is_seq(t):
        item = _dump_hook(get_args(t)[0])
        return list if item is None else lambda v: [item(x) for x in v]
    if _is_pair(t):
        return list
    return None


_EMPTY: tuple[Any, ...] = ("", [], {})


def _class_dump(cls: type) -> Callable[[Any], dict[str, Any]]:
    attrs.resolve_types(cls)
    spec = []
    for a in _fields(cls):
        dump = a.metadata.get("dump") or _dump_hook(a.type)
        spec.append((a.name, _key(a), bool(a.metadata.get("always")), dump))
    order = getattr(cls, "_json_order", None)
    if order is not None:
        spec.sort(key=lambda s: order.index(s[0]))
    has_extra = "extra" in attrs.fields_dict(cls)
    known = known_keys(cls)

    def unstructure_class(instance: Any) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, key, always, dump in spec:
            value = getattr(instance, name)
            if value is None:
                continue
            if dump is not None:
                value = dump(value)
            if always or not (value is None or value in _EMPTY):
                out[key] = value
        if has_extra and instance.extra:
            out.update((k, v) for k, v in instance.extra.items() if k not in out and k not in known)
        return out

    return unstructure_class


_converter: cattrs.Converter | None = None
#: What a failed structure raises: cattrs' errors (once imported) and ours.
_ERRORS: tuple[type[Exception], ...] = (Invalid,)


def converter() -> cattrs.Converter:
    """The one converter, configured at its first use."""
    global _converter, _ERRORS
    if _converter is None:
        import cattrs
        from cattrs.errors import BaseValidationError

        _ERRORS = (BaseValidationError, Invalid)
        conv = cattrs.Converter(detailed_validation=True)
        conv.register_structure_hook(str, _str)
        conv.register_structure_hook(int, _int)
        conv.register_structure_hook(bytes, _bytes)
        conv.register_structure_hook_func(lambda t: t == dict[str, Any], _object)
        conv.register_structure_hook_func(lambda t: t == IPInterface, _cidr)
        conv.register_structure_hook_func(lambda t: t == IPAddress | None, _ip)
        conv.register_structure_hook_factory(_is_seq, _seq_hook)
        conv.register_structure_hook_factory(_is_pair, _pair_hook)
        conv.register_structure_hook_factory(attrs.has, _class_hook)
        conv.register_unstructure_hook_factory(attrs.has, _class_dump)
        _converter = conv
    return _converter


def _path_of(exc: BaseException, path: str) -> tuple[str, BaseException]:
    """The JSON path and the leaf exception of a cattrs error."""
    from cattrs.errors import (
        AttributeValidationNote,
        ClassValidationError,
        IterableValidationError,
        IterableValidationNote,
    )

    while isinstance(exc, (ClassValidationError, IterableValidationError)):
        cls = exc.cl
        exc = exc.exceptions[0]
        for note in getattr(exc, "__notes__", ()):
            if isinstance(note, AttributeValidationNote):
                name = note.name
                if attrs.has(cls):
                    a = attrs.fields_dict(cls).get(name)
                    name = _key(a) if a is not None else name
                path = f"{path}.{name}" if path else name
            elif isinstance(note, IterableValidationNote):
                path = f"{path}[{note.index}]"
    if isinstance(exc, Invalid) and exc.path:
        path = f"{path}.{exc.path}" if path else exc.path
    return path, exc


def structure(value: Any, cls: type[_T], where: str = "") -> _T:
    """``value`` (decoded JSON) read as ``cls``; failure: :class:`Invalid` naming
    the JSON path (under ``where``) and the value."""
    conv = converter()
    try:
        return conv.structure(value, cls)
    except _ERRORS as e:
        path, leaf = _path_of(e, where)
        if isinstance(leaf, Invalid):
            reason = leaf.reason
        elif isinstance(leaf, KeyError):
            reason = "missing"
        else:
            reason = str(leaf) or type(leaf).__name__
        raise Invalid(reason, path) from None


def unstructure(instance: Any) -> dict[str, Any]:
    """The JSON object of ``instance`` (declared names and omission rules, ``extra`` kept)."""
    return converter().unstructure(instance)  # type: ignore[no-any-return]
