"""``/admin/sso/``: the sign-in's start and the provider's callback (the redirect URI to register)."""

from django.urls import path

from fleet.sso.views import SsoCallbackView, SsoStartView

urlpatterns = [
    path("start/", SsoStartView.as_view(), name="sso-start"),
    path("callback/", SsoCallbackView.as_view(), name="sso-callback"),
]
