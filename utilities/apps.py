from django.apps import AppConfig


class UtilitiesConfig(AppConfig):
    """An app only so that Django finds the page kit's templates (utilities/templates/kit/)."""

    name = "utilities"
