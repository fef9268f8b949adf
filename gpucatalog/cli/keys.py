"""``catalog keys``: generate evidence-signing keys and manage the trust file.

Private key material is never printed: only paths and key ids.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from gpucatalog.cli import promote as promote_cli
from gpucatalog.pipelines import keys, trust


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "keys",
        help="generate signing keys; trust a key for channels",
        description="Ed25519 keys that sign certification evidence, and the trust file that says which key "
        "may sign evidence for which channel.",
        epilog="examples:\n"
        "  catalog keys generate --out ~/.config/gpu-catalog/keys --name ci\n"
        "  catalog keys trust ~/.config/gpu-catalog/keys/ci.pub --name ci --channel candidate --channel stable\n"
        "  catalog keys id ~/.config/gpu-catalog/keys/ci.pub\n"
        "  catalog keys import --from-env CATALOG_SIGNING_KEY --out $RUNNER_TEMP/keys --name ci   # in CI",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ks = p.add_subparsers(dest="keys_command", metavar="ACTION", required=True, parser_class=type(p))
    g = ks.add_parser("generate", help="write NAME.key (0600) and NAME.pub into a folder; never overwrites")
    g.add_argument("--out", type=Path, required=True, help="folder for the key pair")
    g.add_argument("--name", default="signing", help="file name stem (default: signing)")
    g.set_defaults(func=run_generate)
    im = ks.add_parser("import", help="write the private key held in an environment variable (a CI secret) to NAME.key (0600)")
    im.add_argument("--from-env", required=True, metavar="VAR", help="environment variable holding the PEM private key")
    im.add_argument("--out", type=Path, required=True, help="folder for the key pair")
    im.add_argument("--name", default="signing", help="file name stem (default: signing)")
    im.set_defaults(func=run_import)
    t = ks.add_parser("trust", help="add a public key to the trust file for some channels")
    t.add_argument("public_key", type=Path, help="a .pub file from `catalog keys generate`")
    t.add_argument("--name", help="name of the key in the trust file (default: the file stem)")
    t.add_argument("--channel", action="append", required=True, help="a channel this key may sign for (repeatable)")
    t.add_argument("--trust-file", type=Path, help="default: CATALOG_DIR/trust.yaml")
    t.set_defaults(func=run_trust)
    i = ks.add_parser("id", help="print the key id of a public key")
    i.add_argument("public_key", type=Path)
    i.set_defaults(func=run_id)


def run_generate(args: argparse.Namespace) -> int:
    k = keys.generate(args.out.expanduser(), args.name)
    print(f"private key: {k.private_path} (mode 0600; keep it secret)")
    print(f"public key:  {k.public_path}")
    print(f"keyid:       {k.keyid}")
    return 0


def run_import(args: argparse.Namespace) -> int:
    k = keys.import_from_env(args.from_env, args.out.expanduser(), args.name)
    print(f"private key: {k.private_path} (mode 0600, from ${args.from_env})")
    print(f"keyid:       {k.keyid}")
    return 0


def run_trust(args: argparse.Namespace) -> int:
    path = args.trust_file or promote_cli.catalog_dir(args) / "trust.yaml"
    pub = keys.load_public(args.public_key.expanduser())
    name = args.name or args.public_key.stem
    kid = trust.add_key(path, name, pub, list(dict.fromkeys(args.channel)))
    print(f"{path}: key {name} ({kid}) may sign for {', '.join(args.channel)}")
    return 0


def run_id(args: argparse.Namespace) -> int:
    print(keys.keyid(keys.load_public(args.public_key.expanduser())))
    return 0
