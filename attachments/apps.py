from django.apps import AppConfig


class AttachmentsConfig(AppConfig):
    name = "attachments"
    verbose_name = "Attachments (files on messages)"

    def ready(self) -> None:
        from django.conf import settings

        from attachments import describe
        from attachments.processing import processor_register
        from attachments.render import attachments_extras
        from attachments.services import CARRIES_NAME
        from attachments.to_model import attachments_carried
        from chats.agent.registry import message_parts_register
        from chats.extras import register_message_extras
        from hermes_site.body_limits import body_limit_register

        register_message_extras("attachments", attachments_extras, default=list)
        # Multipart posts carry files: their path may send more than the API's JSON bodies.
        body_limit_register("/api/v1/uploads/", settings.ATTACHMENTS_API_MAX_BODY_BYTES)
        # How files reach the model: asked by the context builder for messages that carry any.
        message_parts_register(CARRIES_NAME, attachments_carried)
        # Images described once by a vision model when the hub's model takes no images.
        processor_register(describe.PROCESSOR_NAME, wants=describe.wants, run=describe.run)
