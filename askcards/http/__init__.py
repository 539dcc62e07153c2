"""The HTTP edge: what every request passes before askcards' own code (``edge``: Host, security
headers, bounded bodies, the error shape), JSON parsed with limits (``jsonlimits``), outbound
addresses checked (``netguard``), and the server's own guards against slow or greedy clients
(``serverguard``).
"""
