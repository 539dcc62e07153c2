"""DingTalk form cards (SPEC §6.2): the OpenAPI client (``client``) and callback verification and
parsing (``callbacks``). Card texts and variables live with the tool, in
``askcards.tools.dingtalk_ask_user_question``."""
