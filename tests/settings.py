"""Settings for the test suite: the service's own settings with a fast password hasher.

PBKDF2's hundreds of thousands of rounds are the point in production and only a cost in tests,
which create and sign in users by the hundred (admin, panel and socket tests). Servers a test
starts inherit DJANGO_SETTINGS_MODULE, so they check those passwords with the same hasher.
"""
from project.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
