"""What operators read: the dashboard's figures and charts, the presenters that shape stored rows
for reading, the operator's time zone, and ``/metrics``.
"""
