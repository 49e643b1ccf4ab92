"""`vidforge webhooks secret PRINCIPAL`: the secrets a principal's webhooks are signed with, for its receiver — those
VIDFORGE_WEBHOOK_SECRETS_FILE lists for it, else the one derived from the review-link key (serve_app/webhooks/
secrets.py). An operator command: it reads the server's settings and state dir, as `vidforge serve` does, and prints
the secrets on stdout only (one a line, newest first)."""

from __future__ import annotations

import argparse
import sys


def _secret(args: argparse.Namespace) -> int:
    # The settings (pydantic) are imported by the command that runs them: `vidforge --help` answers without them.
    from serve_app._config import Config
    from serve_app.launch._review_key import with_review_key
    from serve_app.webhooks.secrets import SecretsFileInvalid, WebhookSecrets

    config = with_review_key(Config.from_env(data_dir=args.data_dir) if args.data_dir else Config.from_env())
    try:
        secrets = WebhookSecrets(config.webhook_secrets_file, config.review_key).secrets_of(args.principal)
    except (OSError, SecretsFileInvalid) as exc:
        print(f"vidforge: VIDFORGE_WEBHOOK_SECRETS_FILE cannot be read: {exc}", file=sys.stderr)
        return 2
    print("\n".join(secrets))
    return 0


def register_webhook_secret(webhooks: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cmd = webhooks.add_parser("secret", help="print the secrets PRINCIPAL's webhooks are signed with (operator)")
    cmd.add_argument("principal")
    cmd.add_argument("--data-dir", default=None, help="default: $VIDFORGE_DATA_DIR or .vidforge")
    cmd.set_defaults(func=_secret)
