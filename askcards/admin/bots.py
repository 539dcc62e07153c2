"""Bots (Feishu / DingTalk apps): their secrets are write-only; changes go through the services."""
from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db import models
from django.http import HttpRequest

from .. import services
from ..errors import InvalidInput
from ..models import Bot
from .common import OperatorTimeZoneMedia, url_scheme_formfield


SECRET_FIELDS = ("app_secret", "verification_token", "encrypt_key", "api_secret")
# What a change may write: the bot's options and secrets (its platform and app id identify it).
BOT_COLUMNS = ("name", "base_url", "template_id", "callback_mode", "is_active", *SECRET_FIELDS)
PLATFORM_SECRETS: dict[str, tuple[str, ...]] = {
    Bot.Platform.FEISHU: ("app_secret", "verification_token", "encrypt_key"),
    Bot.Platform.DINGTALK: ("app_secret", "api_secret"),
}


def _secret_field(label: str, help_text: str) -> forms.CharField:
    return forms.CharField(
        label=label,
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text=help_text,
    )


class BotForm(forms.ModelForm):
    """Secrets are write-only: never rendered, a blank field keeps the stored value."""

    bot_changes: dict[str, Any]  # a change's fields and new values, checked by the service (clean)

    app_secret = _secret_field("App secret / client secret", "Feishu app_secret or DingTalk client secret.")
    verification_token = _secret_field("Verification token", "Feishu only.")
    encrypt_key = _secret_field("Encrypt key", "Feishu only.")
    api_secret = _secret_field("API secret", "DingTalk only: signs HTTP card callbacks.")
    clear_secrets = forms.MultipleChoiceField(
        label="Clear secrets",
        required=False,
        choices=[(name, name) for name in SECRET_FIELDS[1:]],
        widget=forms.CheckboxSelectMultiple,
        help_text="Remove these stored secrets (the app secret cannot be cleared).",
    )

    class Meta:
        model = Bot
        fields = (
            "platform",
            "app_id",
            "name",
            "base_url",
            "template_id",
            "callback_mode",
            "is_active",
            *SECRET_FIELDS,
        )
        formfield_callback = url_scheme_formfield
        labels = {"app_id": "App ID / client ID (robotCode)"}
        help_texts = {
            "base_url": "Feishu: https://open.feishu.cn or https://open.larksuite.com; "
            "DingTalk: https://api.dingtalk.com. Left blank when adding, the platform's default is used."
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        adding = self.instance.pk is None
        if "base_url" in self.fields:
            self.fields["base_url"].required = not adding
        for name in SECRET_FIELDS:
            # The decrypted value must not even sit in the form's initial data.
            self.initial[name] = ""
            if adding:
                continue
            state = "Set; leave blank to keep it." if getattr(self.instance, name) else "Not set."
            self.fields[name].help_text = f"{state} {self.fields[name].help_text}"
        if adding:
            self.fields["app_secret"].required = True
            del self.fields["clear_secrets"]

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        to_clear = set(cleaned.get("clear_secrets") or ())
        for name in SECRET_FIELDS:
            if name in to_clear:
                cleaned[name] = ""
            elif not cleaned.get(name) and self.instance.pk is not None:
                cleaned[name] = getattr(self.instance, name)
        if self.instance.pk is not None and not self.errors:
            # A change is written by services.bot_update (BotAdmin.save_model): what it would
            # refuse is shown here, on the form, and nothing is saved.
            self.bot_changes = {
                name: cleaned[name] for name in BOT_COLUMNS
                if name in self.fields and name in cleaned and cleaned[name] != getattr(self.instance, name)
            }
            try:
                services.bot_update_check(bot=self.instance, **self.bot_changes)
            except InvalidInput as exc:
                raise forms.ValidationError(exc.message) from None
        elif self.instance.pk is None and not self.errors:
            # An add is written by services.bot_add, which refuses what the platform does not use.
            try:
                services.bot_options_check(platform=cleaned["platform"], **{
                    name: cleaned[name] for name in BOT_COLUMNS if name in self.fields and name in cleaned})
            except InvalidInput as exc:
                raise forms.ValidationError(exc.message) from None
        return cleaned


@admin.register(Bot)
class BotAdmin(admin.ModelAdmin):
    Media = OperatorTimeZoneMedia

    form = BotForm
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    list_display = ("__str__", "platform", "app_id", "name", "base_url", "callback_mode", "is_active", "secrets")
    list_filter = ("platform", "callback_mode", "is_active")
    search_fields = ("app_id", "name", "template_id")
    ordering = ("platform", "app_id")
    readonly_fields = ("secrets", "created_at")

    def get_fields(self, request: HttpRequest, obj: Bot | None = None) -> tuple[str, ...]:
        fields: tuple[str, ...] = (
            "platform", "app_id", "name", "base_url", "template_id", "callback_mode", "is_active", *SECRET_FIELDS,
        )
        if obj is not None:
            fields += ("clear_secrets", "secrets", "created_at")
        return fields

    def get_readonly_fields(self, request: HttpRequest, obj: Bot | None = None) -> tuple[str, ...]:
        # The platform decides which secrets mean what, and the two name the bot (its callback
        # URLs, askcards_bot update <platform> <app id>): changing them is adding another bot.
        return (*self.readonly_fields, "platform", "app_id") if obj is not None else ()

    @admin.display(description="secrets")
    def secrets(self, bot: Bot) -> str:
        names = PLATFORM_SECRETS.get(bot.platform, SECRET_FIELDS)
        return ", ".join(f"{name}: {'set' if getattr(bot, name) else 'not set'}" for name in names)

    def save_model(self, request: HttpRequest, obj: Bot, form: forms.ModelForm, change: bool) -> None:
        if change:
            # The form wrote its values onto ``obj``; the service compares the stored bot with the
            # changes BotForm.clean checked, writes only those and logs them.
            assert isinstance(form, BotForm)
            obj.refresh_from_db()
            services.bot_update(bot=obj, **form.bot_changes)
            return
        data = form.cleaned_data
        created = services.bot_add(
            platform=obj.platform,
            app_id=obj.app_id,
            app_secret=data["app_secret"],
            base_url=obj.base_url,
            name=obj.name,
            verification_token=data["verification_token"],
            encrypt_key=data["encrypt_key"],
            api_secret=data["api_secret"],
            template_id=obj.template_id,
            callback_mode=obj.callback_mode,
            is_active=obj.is_active,
        )
        obj.pk = created.pk
        obj.refresh_from_db()
        obj._state.adding = False
