from django.apps import AppConfig


class AskcardsConfig(AppConfig):
    name = "askcards"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from askcards.runtime import checks  # noqa: F401  (registers system checks)
        from . import selectors  # noqa: F401  (its signal receivers clear the bot cache)
