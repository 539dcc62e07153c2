"""Bots are granted to agents. So that an upgrade breaks nobody, every bot is granted to each
agent that already has a session on it."""

from django.db import migrations, models


def grant_bots_in_use(apps, schema_editor):
    Session = apps.get_model("askcards", "Session")
    Through = apps.get_model("askcards", "Agent").bots.through
    pairs = Session.objects.exclude(bot=None).values_list("agent_id", "bot_id").distinct()
    Through.objects.bulk_create(
        [Through(agent_id=agent_id, bot_id=bot_id) for agent_id, bot_id in pairs], ignore_conflicts=True
    )


class Migration(migrations.Migration):

    dependencies = [
        ("askcards", "0009_callback_receipt_no_created_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="agent",
            name="bots",
            field=models.ManyToManyField(
                blank=True,
                help_text="The Feishu and DingTalk bots this agent's sessions may use.",
                related_name="agents",
                to="askcards.bot",
                verbose_name="bots granted",
            ),
        ),
        migrations.RunPython(grant_bots_in_use, migrations.RunPython.noop),
    ]
