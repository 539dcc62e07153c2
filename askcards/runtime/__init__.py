"""The server process itself: its paced garbage collections (``collector``), its JSON log format
(``logformat``) and the deployment checks ``manage.py check`` runs (``checks``).
"""
