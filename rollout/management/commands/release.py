from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from core.errors import DomainError
from rollout.registry.binaries import release_binary_store


class Command(BaseCommand):
    help = "Manage registered releases. 'release upload <version> <platform> <file>' stores a binary's bytes."
    # The module's own checks (keys, delivery: where the bytes go) and not the URL and admin ones, which
    # import every view: an upload's memory is Django's and one chunk (docs/operations.md#binary-delivery).
    requires_system_checks = ["rollout"]

    def add_arguments(self, parser):
        verbs = parser.add_subparsers(dest="verb", required=True)
        upload = verbs.add_parser(
            "upload",
            help="Store a binary after checking it against the registered manifest's sha256 and size.",
        )
        upload.add_argument("version")
        upload.add_argument("platform", help="linux-<arch>, as in the manifest")
        upload.add_argument("file", type=Path)

    def handle(self, *args, verb: str, **options):
        if verb == "upload":
            self._upload(options["version"], options["platform"], options["file"])

    def _upload(self, version: str, platform: str, path: Path) -> None:
        if not path.is_file():
            raise CommandError(f"{path}: no such file.")
        try:
            with path.open("rb") as source:
                binary = release_binary_store(version=version, platform=platform, source=source)
        except DomainError as exc:
            raise CommandError(f"{exc.code}: {exc.detail}") from exc
        self.stdout.write(f"Stored {binary.storage_name} ({binary.size} bytes, sha256 {binary.sha256}).")
