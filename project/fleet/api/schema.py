"""OpenAPI descriptions of the two bearer schemes (imported by views so drf-spectacular sees them)."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension


class ApiKeyScheme(OpenApiAuthenticationExtension):
    target_class = "project.fleet.api.authentication.ApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "An API key (manage.py createapikey)."}


class AgentTokenScheme(OpenApiAuthenticationExtension):
    target_class = "project.fleet.api.agent_auth.AgentTokenAuthentication"
    name = "agentToken"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "A node's agentToken (shown once at creation)."}
