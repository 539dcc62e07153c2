from django.contrib import admin
from django.urls import include, path
from django.views.generic import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from askcards import callbacks
from askcards.pages import views

handler400 = "askcards.pages.views.bad_request"
handler500 = "askcards.pages.views.server_error"

urlpatterns = [
    path("", RedirectView.as_view(url="/panel/", permanent=False)),
    path("healthz", views.healthz, name="healthz"),
    path("metrics", views.metrics, name="metrics"),
    path("panel/", views.panel, name="panel"),
    path("login/", views.login, name="login"),
    path("logout/", views.logout, name="logout"),
    path("callbacks/feishu/<str:app_id>/", callbacks.feishu_callback, name="feishu-callback"),
    path("callbacks/dingtalk/<str:client_id>/", callbacks.dingtalk_callback, name="dingtalk-callback"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("askcards.api.urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="docs"),
]
