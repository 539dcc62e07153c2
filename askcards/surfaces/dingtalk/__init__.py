"""DingTalk form cards (SPEC §6.2): the OpenAPI client (``client``), callback verification and
parsing (``callbacks``), the card's variables and the clicker's notices (``cards``), the surface
(``surface``) and the Stream client (``stream``). The form, how answers read and what the model
reads are the tool's, in ``askcards.tools.dingtalk_ask_user_question``."""
